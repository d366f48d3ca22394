// A plan compiled for the executor: per position of the iteration, what to issue before and after the op, with
// the plan's buffers resolved to the address ranges and allocations the runtime sees.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "policy/hw_profile.h"
#include "policy/plan.h"
#include "ground/common/status.h"
#include "runtime/observe/recorder.h"

namespace karma::rt {

// How the executor carries out a plan over managed memory (policy/README.md has the plan's semantics):
//  - swap-out: prefetch to the host (the write-back frees the device pages); `keep` swap-outs need nothing,
//    since managed memory keeps the host copy coherent;
//  - swap-in: prefetch to the device on the host-to-device stream; the waiting op's stream waits for it only
//    if it has not completed; swap-ins that leave at the same point go in one batch call per waiting op, in the
//    order the ops come, so that an op never waits for data a later op needs;
//  - discard: only for buffers a recompute rebuilds (exact ones: allocations made and freed inside the
//    iteration). A discard whose value is needed again (the host copy is current) becomes an eviction; one whose
//    value is dead is left to the free of its allocation (the executor discards freed arena blocks). Memory the
//    application keeps holds live values throughout as far as the plan knows (PlanningIteration): it is only
//    evicted and prefetched, with its bytes;
//  - recompute: the recorded launches issued again on the waiting op's stream right before it; its scratch outputs
//    (policy::Action::scratch) go to the executor's scratch memory, never into the buffer;
//  - what the plan frees without an action (a value whose next use overwrites it, policy::StaticMemory) is
//    discarded at its last use when a recompute writes it next, which then rebuilds it: after an op, or after the
//    launches of the recompute that used it last.
struct ReplayProgram {
  enum class Move : uint8_t { kPrefetch = 0, kEvict = 1, kDiscard = 2 };
  struct Item {
    Move move = Move::kPrefetch;
    trace::BufferId buffer = trace::kNone;
    uint32_t action = 0;                   // the plan action (UINT32_MAX: a discard the plan implies)
    uint32_t recompute = UINT32_MAX;       // discards: the recompute that rebuilds the buffer
    uint32_t need = UINT32_MAX;            // prefetches: the position whose op waits for it
  };
  struct Recompute {
    uint32_t action = 0;                    // the plan action
    uint32_t before = 0;                    // the position it runs before
    std::vector<trace::OpId> ops;
    std::vector<trace::BufferId> targets;   // discarded for it, rebuilt by it
    std::vector<trace::BufferId> written;   // every buffer its ops write or touch, less `scratch`
    std::vector<trace::BufferId> used;      // every buffer its ops use, less `scratch`
    // Outputs that go to scratch memory (policy::Action::scratch: their memory holds a newer value by then).
    std::vector<trace::BufferId> scratch;
    // Values it writes that the plan lets go once its launches have run (policy::StaticMemory frees a value at its
    // last use when its next use overwrites it): `rebuilt_by` is the recompute whose launches write it next, which
    // then has it among its targets (kNone: an op of the iteration writes it afresh).
    struct Dropped {
      trace::BufferId buffer = trace::kNone;
      uint32_t rebuilt_by = trace::kNone;
    };
    std::vector<Dropped> dropped;
  };

  uint32_t period = 0;
  std::vector<uint64_t> shape;                    // per position: the op's shape signature
  std::vector<StreamKey> stream;                  // per position: the op's stream
  std::vector<ReplayBuffer> buffers;              // per trace buffer
  // Per trace buffer: the plan keeps it off the device between iterations (policy::Plan::host_resident) and a
  // swap-in brings it back before the iteration's first use of it.
  std::vector<bool> brought_back;
  std::vector<uint64_t> alloc_size;               // per allocation ordinal of the iteration: its size
  // after[0]: issued before op 0 (the plan's "at start"); after[p + 1]: once op p has completed.
  std::vector<std::vector<Item>> after;
  // Per entry of `after`: buffers the plan counts as freed by then (their last use has passed) that the
  // application frees only later. Prefetches of that entry wait until they are freed (or moved away), so that
  // the device never holds more than the plan does.
  std::vector<std::vector<trace::BufferId>> room_from;
  std::vector<std::vector<uint32_t>> waits;       // per position: swap-in actions its op waits for
  std::vector<std::vector<uint32_t>> recompute_before;  // per position: indices into recomputes
  std::vector<Recompute> recomputes;
  std::vector<std::vector<trace::BufferId>> reads;  // per position: buffers the op reads (demand paging if away)
  std::vector<Relaunch> relaunch;                 // per op, as recorded
  std::vector<bool> in_recompute;                 // per op: some recompute re-runs it (its launch is kept fresh)
  std::vector<std::vector<trace::BufferId>> uses;  // per op: every buffer it reads, writes or touches
  // Per position: the plan's most device bytes while the op and the recomputes right before it run.
  std::vector<uint64_t> planned_bytes;
  size_t actions = 0;                             // of the plan
  // Evictions of buffers a plan swap-in brought back with nothing writing them since (memory the application
  // keeps): a read-duplicated copy could leave without a write-back. Counted for the log.
  size_t duplicable = 0;
  uint64_t duplicable_bytes = 0;
  std::string summary;                            // counts, for the log

  // Nothing to move: the plan fits in the budget as the application runs it. The executor then leaves freed
  // blocks and new allocations alone (discarding and repopulating them costs the driver real time per block).
  // Scans every position's actions.
  bool Idle() const {
    return recomputes.empty() && std::all_of(after.begin(), after.end(), [](const auto& v) { return v.empty(); });
  }
};

// Compiles `plan` for the recorded iteration it was made for. Refuses plans whose shape does not fit the
// iteration; recompute actions whose ops cannot be re-launched or write non-exact buffers are refused too
// (the planner was told not to make them; a plan file from elsewhere might). `planned_with`: the profile the plan
// was made for, whose simulation says when each swap-in can start.
Result<std::shared_ptr<const ReplayProgram>> CompileProgram(const RecordedIteration& rec, const policy::Plan& plan,
                                                            const policy::HwProfile& planned_with = policy::DefaultProfile());

}  // namespace karma::rt
