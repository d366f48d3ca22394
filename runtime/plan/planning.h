// Planning a recorded iteration inside libkarma.so: the GPU profile, what the executor can actually do, the
// planner, and the plan files a later run with the same inputs reuses.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "policy/access.h"
#include "policy/hw_profile.h"
#include "policy/plan.h"
#include "ground/common/managed_pages.h"
#include "ground/common/status.h"
#include "runtime/observe/recorder.h"

namespace karma::rt {

// The profile whose figures the planner uses for a device, chosen by its name ("V100", "A100", "H100", and
// "H200" with the H100's figures: h100-80g, whose moves are managed memory at the rates measured on an H100); the
// default profile for any other device.
const policy::HwProfile& ProfileForDevice(const std::string& device_name);

// Whether measured host-link rates (Executor::LinkRates; 0: not measured that way) depart from those `assumed`
// enough to plan again with them (policy::WithLink): below 0.8x or above 1.25x in a direction measured.
bool LinkDeparts(const policy::HwProfile& assumed, double h2d_bw, double d2h_bw);

// What the planner is told beside the iteration, per op and per buffer of it (either may be empty).
struct PlanFlags {
  std::vector<bool> no_recompute;  // per op: a recompute candidate that failed its validation
  // Per buffer: the host reads or writes its value between iterations (data parallel: the gradients libkarma_mpi.so
  // exchanges, the parameters it updates on the host). The plan keeps each off the device between iterations
  // (policy::HomeOnHost).
  std::vector<bool> host_home;
};

struct PlanRequest {
  const RecordedIteration* recorded = nullptr;
  policy::HwProfile profile{};
  uint64_t capacity = 0;          // KARMA_CAPACITY resolved: device bytes for tensors
  std::string cache_dir;          // KARMA_TRACE_DIR; empty: no plan file
  PlanFlags flags;
  // Planner II (solver::PlanKarma: GLPK, warm-started from the heuristic plan) instead of Planner I's search. It
  // improves on a plan already made: no plan file is read, and the file is written only when the plan simulates
  // faster than `improve_on_s` (0: always).
  bool ilp = false;
  double improve_on_s = 0;
  const std::atomic<bool>* cancel = nullptr;  // set when the process exits: Planner II stops early
};

struct PlanOutcome {
  policy::Plan plan;
  std::string key;       // the cache key: policy::Fingerprint of the planning inputs (see PlanKey)
  std::string path;      // the plan file written or reused; empty when none
  bool reused = false;   // read from an existing plan file
  double simulated_s = 0;  // the planner's simulated iteration time (0 when reused)
  double incore_s = 0;     // the iteration's own ops back to back
  uint64_t incore_peak_bytes = 0;  // what the planning iteration holds at its peak with every value kept in core
  // The same as the application holds its memory (trace::HeldMemory). The planning iteration counts a buffer freed
  // later inside the iteration until its free already: what is late here is freed only in a later iteration.
  uint64_t held_peak_bytes = 0;
  uint64_t late_freed_buffers = 0;
  uint64_t most_late_bytes = 0;
  bool improves = true;    // false when the request's improve_on_s is set and this plan is not faster than it
  // The buffers homed on the host (PlanFlags::host_home): their bytes, and the pages of their own the plan moves.
  uint64_t homed_bytes = 0, homed_owned_bytes = 0;
  // Ops whose own buffers exceed the capacity: no plan keeps them on the device, they run with demand paging.
  uint32_t paged_ops = 0;
  trace::OpId largest_op = trace::kNone;  // the one that uses the most, with its bytes
  uint64_t largest_op_bytes = 0;
};

// What a user reads when some ops are larger than the budget (PlanOutcome::paged_ops > 0): which, by how much,
// and what would avoid it (a larger KARMA_CAPACITY where the device has the memory, else a smaller batch); empty
// when there are none. `device_bytes` is the device's memory, 0 when unknown.
std::string DescribePagedOps(const PlanOutcome& outcome, const trace::Iteration& it, uint64_t capacity,
                             uint64_t device_bytes);
// What a user reads when the application holds more than the budget at once because it frees buffers after their
// last use (no plan moves memory the application still holds: the device holds it beyond the plan); empty when
// what it holds fits.
std::string DescribeLateFrees(const PlanOutcome& outcome, uint64_t capacity);

// What the planner sees for moves on `profile`'s path: the recorded iteration with every buffer the arena does not
// pack into a slab (above 1 MiB) rounded up to whole pages of the path (the arena gives such buffers pages of
// their own, and moves go by page: 2 MiB chunks of the virtual memory API on the copy path, 64 KiB residency pages
// on managed memory), so that a plan within the capacity keeps the device within it, while a move on the copy path
// takes as long as the value's own bytes (Buffer::moved_bytes: the copy path copies no more); a buffer read by the
// op before its late free (the device holds it until then); and memory the application keeps (no allocation in
// the iteration) read by its first use, so that its value is live throughout: KARMA moves it, never drops it.
// Such memory packed with others in a slab (1 MiB or less) counts only the whole pages it owns: the executor moves
// no page a neighbour shares, and those are in UnmovableBytes.
trace::Iteration PlanningIteration(const trace::Iteration& it, const policy::HwProfile& profile);

// The device memory no plan moves, from the recorded addresses, in pages of `profile`'s path: the pages that
// small buffers the application keeps (weights, biases, their gradients) share with their neighbours in a slab.
// The planner's capacity is the budget less these bytes.
uint64_t UnmovableBytes(const trace::Iteration& it, const policy::HwProfile& profile);

// Per op, whether the executor can re-run it in a recompute: it can launch it again (a plain kernel launch or a
// GEMM), and every buffer it writes or touches is exact (ReplayBuffer::exact): nothing else may be rebuilt.
std::vector<bool> RecomputableByExecutor(const RecordedIteration& rec);

// The key of the plan cache: policy::Fingerprint of the planning iteration with measured durations left out
// (they vary from run to run on a GPU), the profile (policy::ProfileLabel), the capacity and
// solver::kPlannerVersion, plus the ops
// excluded from recompute and the buffers homed on the host.
std::string PlanKey(const trace::Iteration& planning, const policy::HwProfile& profile, uint64_t capacity,
                    const PlanFlags& flags);

// Plans with KARMA's planner, or reuses CACHE_DIR/<key>.plan.json when it exists and was made for the same key;
// writes that file otherwise (with `ilp`, see PlanRequest). A plan that fits in core has no actions.
Result<PlanOutcome> MakeRuntimePlan(const PlanRequest& request);

}  // namespace karma::rt
