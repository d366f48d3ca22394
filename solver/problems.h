// The KARMA paper's two optimization problems as integer programs over the policy/ cost model: problem 1
// (blocking: consecutive candidate layers into blocks, which blocks leave the device) and problem 2 (which
// evicted blocks are recomputed instead of swapped back in). solver/README.md writes both out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/karma.h"
#include "policy/planning_model.h"
#include "solver/mip.h"

namespace karma::solver {

// A run of forward ops that problem 1 never splits: it starts at a clean cut (policy::BlockCuts).
struct CandidateLayer {
  uint32_t first_op = 0, last_op = 0;
  double forward_s = 0;
  uint64_t saved_bytes = 0;  // saved data its ops write last in the forward pass
};

// Coarsening, so that the models stay small whatever the graph: the clean cuts are merged into runs holding
// about SavedBytes / max_layers of saved data each (a new layer where the saved memory has grown by that much),
// and every op of `required_starts` (a heuristic blocking to warm-start from) starts a layer.
// With `whole_buffers`, from the buffer cuts only (policy::BlockCuts).
std::vector<CandidateLayer> CandidateLayers(const policy::PlanningModel& m, size_t max_layers,
                                            const std::vector<uint32_t>& required_starts, bool whole_buffers = false);

// Blocks from candidate layers: `starts[l]` says layer l begins a block (layer 0 always does); a block is
// evicted (kSwap) when `evicted[l]` holds for its first layer.
std::vector<policy::Block> BlocksOfLayers(const policy::PlanningModel& m, const std::vector<CandidateLayer>& layers,
                                          const std::vector<bool>& starts, const std::vector<bool>& evicted);

// What problem 1 knows, measured with policy's plan builder for one layer-granularity option (see README).
struct BlockingData {
  std::vector<CandidateLayer> layers;
  std::vector<double> out_s;      // per layer: device-to-host time of what evicting it swaps
  std::vector<double> in_s;       // per layer: host-to-device time of the same
  std::vector<double> rebuild_s;  // per layer: cheap-layer recompute evicting it adds
  std::vector<double> wait_s;     // per layer: backward compute before its data is first needed
  std::vector<uint32_t> need;     // per layer: the op that first needs its data back (kNone: none)
  double round_trip_s_per_byte = 0;  // a byte of other data out and back in
  // A memory checkpoint: an op where, with every block kept, the plan needs `demand` bytes more than it may; each
  // evicted layer frees `relief` there, and capacity-based eviction of other data (persistent, forward-only
  // temporaries) can free at most `residual`.
  struct Point {
    uint32_t op = 0;
    double demand = 0;
    double residual = 0;
    std::vector<std::pair<size_t, double>> relief;
  };
  std::vector<Point> points;
};
// `reference`: the blocking to measure on (the warm start's), its block starts among the layers' starts.
BlockingData MeasureBlocking(const policy::PlanningModel& m, std::vector<CandidateLayer> layers,
                             const std::vector<policy::Block>& reference, const policy::KarmaPlanOptions& options);

struct BlockingModel {
  MipModel mip{"problem 1"};
  std::vector<int> start, evicted;  // columns per layer (start[0] is -1: layer 0 always starts a block)
  int stall_out = -1, stall_in = -1;  // exposed swap-out and swap-in time
  int residual_max = -1;            // the most other data evicted at any memory checkpoint
  std::vector<size_t> points;       // the memory checkpoints with rows so far (indices into BlockingData::points)
  std::vector<int> residual;        // their columns: other data evicted there
};
// Problem 1 with blocks of at most `max_block_bytes` saved data (a layer larger than that is a block alone),
// without memory checkpoints: those are added by AddCheckpoints, as a solve needs them (row generation; a large
// graph has thousands, of which a few dozen bind).
Result<BlockingModel> BuildBlockingModel(const BlockingData& d, uint64_t max_block_bytes);
Status AddCheckpoints(const BlockingData& d, BlockingModel& model, const std::vector<size_t>& points);
// The checkpoints to start with: the `per_rule` largest demands, and the `per_rule` largest shortfalls with the
// given layers evicted (a warm start's) and with every layer evicted.
std::vector<size_t> InitialCheckpoints(const BlockingData& d, const std::vector<bool>& evicted, size_t per_rule);
// Checkpoints without a row that the decisions in `x` leave short of memory, or that would need more other data
// evicted than the solution pays for; at most `limit`, the worst first.
std::vector<size_t> ViolatedCheckpoints(const BlockingData& d, const BlockingModel& model, const std::vector<double>& x,
                                        size_t limit);
// The column values of a given blocking (over the same layers), to warm-start from; the continuous columns
// are the least the rows allow.
std::vector<double> BlockingValues(const BlockingData& d, const BlockingModel& model, const std::vector<bool>& starts,
                                   const std::vector<bool>& evicted);

// What problem 2 knows about blocks with modes (from policy::FactsOf and the cost model).
struct RecomputeData {
  std::vector<size_t> evicted;     // indices of the evicted blocks, forward order
  std::vector<double> forward_after_s;  // per evicted block: the forward compute after it
  std::vector<double> recompute_s; // per evicted block: rebuilding its dropped data; < 0: impossible
  std::vector<double> out_s, in_s;             // swapping all of its saved data out / in
  std::vector<double> dropped_out_s, dropped_in_s;  // the part a recompute rebuilds instead
  std::vector<double> wait_s;      // backward compute before its data is first needed
  std::vector<uint32_t> need;
};
RecomputeData MeasureRecompute(const policy::PlanningModel& m, const std::vector<policy::Block>& blocks);

struct RecomputeModel {
  MipModel mip{"problem 2"};
  std::vector<int> recompute;  // column per evicted block, -1 where recomputing is impossible
  int stall_out = -1, stall_in = -1;
};
Result<RecomputeModel> BuildRecomputeModel(const RecomputeData& d);
std::vector<double> RecomputeValues(const RecomputeData& d, const RecomputeModel& model, const std::vector<bool>& on);

}  // namespace karma::solver
