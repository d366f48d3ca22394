// KARMA's planner: problem 1 (blocking), problem 2 (recompute selection), and the plan they give.
//
// Planner II replaces either step by an ILP solution: both take and return plain data (blocks with modes),
// and BuildKarmaPlan turns any blocking into an executable plan.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "policy/plan.h"
#include "policy/planning_model.h"
#include "policy/strategies.h"

namespace karma::policy {

// What problem 1 and 2 see of a forward block: its saved data and what rebuilding it would cost.
struct BlockFacts {
  uint64_t saved_bytes = 0;        // saved for the backward pass, written in the block
  uint64_t dropped_bytes = 0;      // of which a recompute would rebuild (the rest crosses into later blocks)
  uint64_t saved_moved = 0;        // what moves of the saved and of the dropped data copy (Buffer::MovedBytes)
  uint64_t dropped_moved = 0;
  double forward_s = 0;            // compute time of the block's forward ops
  double recompute_s = -1;         // time to rebuild the dropped data before its backward use; < 0: impossible
  double swap_in_s = 0;            // saved_moved over the host-to-device link
};

// The cut points (ops where a block may start: clean cuts at layer starts, or with `whole_buffers` buffer cuts)
// in order, op 0 first.
std::vector<uint32_t> BlockCuts(const PlanningModel& m, bool whole_buffers = false);
// The kinds of cut worth a blocking each: {false} where the buffer cuts are the clean cuts (no memory reused within
// the forward pass), else {false, true} (BlockingOptions::whole_buffers).
std::vector<bool> CutKinds(const PlanningModel& m);
// Blocks over the whole forward pass, starting at the given cut ops (ascending, starting with 0), all kKeep.
std::vector<Block> BlocksFromCuts(const PlanningModel& m, const std::vector<uint32_t>& starts);
BlockFacts FactsOf(const PlanningModel& m, const std::vector<Block>& blocks, size_t index);

struct KarmaPlanOptions {
  // Problem 2 at layer granularity: within swapped blocks, rebuild a value instead of swapping it when that
  // costs less than this fraction of its swap-in time (cheap layers: normalization, activation, pooling);
  // 0 disables.
  double cheap_recompute_ratio = 0;
  bool cheap_in_kept_blocks = false;  // also drop and rebuild cheap values of kept blocks, to make room
};

// The grid PlanKarma searches (Planner II solves its models on the same one): problem 2 at layer granularity,
// and the number of blocks problem 1 aims at (blocks of SavedBytes / count).
std::span<const KarmaPlanOptions> KarmaLayerOptions();
std::span<const uint32_t> KarmaBlockCounts();
std::string DescribeLayerOptions(const KarmaPlanOptions& options);  // for plan notes: "" or ", cheap layers ..."
uint64_t SavedBytes(const PlanningModel& m);                        // every saved buffer's bytes

// Problem 1. Splits the forward layers into blocks of consecutive layers, each holding about
// `target_block_bytes` of saved data, and evicts blocks (kSwap) from the first one on — the data the backward
// pass needs last — until the plan with every evicted block swapped fits the capacity (capacity-based
// swapping: keep as much as fits). Stages then pair each block's compute with the transfer of another.
struct BlockingOptions {
  uint64_t target_block_bytes = 0;
  uint32_t extra_evicted = 0;  // evict this many blocks beyond the first that fit (trades transfer for room)
  KarmaPlanOptions plan;       // the layer-granularity recompute the capacity test assumes
  bool whole_buffers = false;  // blocks start only where no buffer is written on both sides (buffer_cut)
};
std::vector<Block> SolveBlocking(const PlanningModel& m, const BlockingOptions& options);

// Problem 2. Marks an evicted block kRecompute when rebuilding it from the nearest checkpoint costs less than
// `ratio` times swapping it back in (ratio 1 is the paper's rule): its recompute then runs on the compute
// engine while the copy engine brings in the blocks before it.
struct RecomputeOptions {
  double ratio = 1.0;
};
void SelectRecompute(const PlanningModel& m, std::vector<Block>& blocks, const RecomputeOptions& options);

// The part of BuildKarmaPlan that follows from the blocks alone (recomputes, drops, the swaps of evicted blocks,
// each eviction tagged with its block), before whatever still does not fit is evicted capacity-based: what
// Planner II measures its coefficients on. `blocks` is updated to the modes actually used.
PlanBuilder KarmaBlockDecisions(const PlanningModel& m, std::vector<Block>& blocks, const KarmaPlanOptions& options);

// The executable plan for blocks with modes: kSwap data goes out after its last forward use and comes back
// first-in first-out as early as capacity allows; kRecompute blocks drop what they rebuild, keep (or swap,
// when they are evicted) what crosses into later blocks, and re-run their forward ops before their backward
// pass. Whatever still does not fit is evicted capacity-based, persistent data last.
Result<Plan> BuildKarmaPlan(const PlanningModel& m, const std::vector<Block>& blocks, const KarmaPlanOptions& options);

// Local search around a finished plan, with the same options: its neighbours are its blocks with one block's mode
// set to each of the other two (kKeep, kSwap, kRecompute), with one boundary moved to the next clean cut either
// way, or with the ops of one of its recomputes barred from recompute (the plan then swaps or keeps what that
// recompute rebuilt, or rebuilds it otherwise); a neighbour whose plan cannot be built, or comes out the same, is
// skipped. Keeps the first faster plan in `best` and goes on from it while `more()` allows; returns how many plans
// it tried.
int PolishKarmaPlan(const SimInput& in, const KarmaPlanOptions& options, Candidate& best,
                    const std::function<bool()>& more);

}  // namespace karma::policy
