// An out-of-core plan: timed swap/discard/recompute actions anchored to op positions, plus its block structure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ground/common/status.h"
#include "ground/trace/model.h"

namespace karma::policy {

// Values are stored in plan files: append, never renumber.
enum class ActionKind : uint8_t {
  kSwapOut = 0,    // device-to-host copy; the device copy is freed when the copy completes (unless keep)
  kSwapIn = 1,     // host-to-device copy (prefetch); it needs free capacity for the buffer when it starts
  kDiscard = 2,    // free the device copy without writing it back (contents dead, or valid on the host)
  kRecompute = 3,  // re-run forward ops on the compute engine to rebuild buffers
};
inline constexpr int kActionKindCount = 4;
const char* Name(ActionKind k);
bool ParseActionKind(std::string_view s, ActionKind* out);

// `after` of an action issued when the iteration begins, before op 0.
inline constexpr int32_t kAtStart = -1;

// One action. The copy engines serve swap-outs and swap-ins first-in first-out, in plan order; an action is
// issued once op `after` has completed, and a copy starts when its engine reaches it (a swap-in also waits
// for free capacity).
struct Action {
  ActionKind kind = ActionKind::kSwapOut;
  trace::BufferId buffer = trace::kNone;  // swap-out, swap-in, discard
  int32_t after = kAtStart;               // issued once op `after` has completed; kAtStart: at the start
  // swap-in: the op that must wait for the copy; swap-out: an op that must wait until the copy has finished
  // (a synchronous offload, as vDNN does), or kNone; recompute: the op it runs right before.
  uint32_t before = trace::kNone;
  bool keep = false;                      // swap-out only: write back but keep the device copy
  std::vector<trace::OpId> ops;           // recompute only: the forward ops to re-run, in order
  // Recompute only: outputs of those ops that go to scratch memory for the recompute's duration instead of into
  // the buffer, whose memory holds a newer value by then (ScratchOutputs; the runtime redirects the launches).
  std::vector<trace::BufferId> scratch;
  int32_t block = -1;                     // the block the data belongs to (stage notation), -1: none

  bool operator==(const Action&) const = default;
};

// How a block of consecutive forward layers keeps the data it saves for the backward pass.
enum class BlockMode : uint8_t { kKeep = 0, kSwap = 1, kRecompute = 2 };
inline constexpr int kBlockModeCount = 3;
const char* Name(BlockMode m);
bool ParseBlockMode(std::string_view s, BlockMode* out);

struct Block {
  uint32_t first_op = 0;  // forward ops [first_op, last_op]
  uint32_t last_op = 0;
  BlockMode mode = BlockMode::kKeep;

  bool operator==(const Block&) const = default;
};

// 2: recompute actions may list scratch outputs (a reader of version 1 would run them in place).
inline constexpr int kPlanFormatVersion = 2;

struct Plan {
  std::string strategy;
  std::string profile;
  uint64_t capacity_bytes = 0;
  std::string fingerprint;                      // Fingerprint() of the inputs it was made for; may be empty
  // Persistent buffers that are not on the device between iterations: absent at the start, and back on the
  // host (or dead) at the end. Every other persistent buffer is on the device at both ends.
  std::vector<trace::BufferId> host_resident;
  std::vector<Action> actions;                  // in issue order
  std::vector<Block> blocks;                    // forward blocks, in order (may be empty)
  std::string note;                             // how the strategy chose this plan
  // The plan runs over CUDA managed memory (KARMA's runtime, capacity-based swapping): an op whose own buffers
  // exceed the capacity still runs, its excess paged on demand. False for strategies that allocate device
  // memory explicitly (vDNN, SuperNeurons, checkpointing), where such an op cannot run.
  bool managed_memory = false;

  bool operator==(const Plan&) const = default;
};

// References in range, recompute lists non-empty, swap-ins waited for after they are issued. Semantic
// validity (capacity, data) is the simulator's and the checker's business.
Status CheckPlanShape(const Plan& plan, const trace::Iteration& it);

// A stable 64-bit hash (hex) of the iteration's ops and buffers, the profile name and the capacity: what a
// plan cache keys on and what a loaded plan is checked against.
std::string Fingerprint(const trace::Iteration& it, const std::string& profile, uint64_t capacity_bytes);
// A short stable hash (8 hex digits) of which entries of `flags` are set, for a key suffix naming a subset (ops
// barred from recompute, buffers written back); empty when none is set.
std::string FlagSetTag(const std::vector<bool>& flags);

// Counts by kind, for printing.
struct PlanCounts {
  uint64_t swap_outs = 0, swap_ins = 0, discards = 0, recomputes = 0, recomputed_ops = 0;
  uint64_t swap_out_bytes = 0, swap_in_bytes = 0;
};
PlanCounts CountActions(const Plan& plan, const trace::Iteration& it);

}  // namespace karma::policy
