// The coarsened view strategies plan on: layers, block cut points, saved data, recompute chains, idle gaps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/plan_builder.h"
#include "policy/simulator.h"

namespace karma::policy {

// A layer: one op that does the work (its anchor) with the view, allocation and bookkeeping ops around it,
// consecutive and in one phase.
struct Layer {
  uint32_t first = 0, last = 0;  // ops [first, last]
  trace::Phase phase = trace::Phase::kUnknown;
  uint32_t anchor = 0;
  LayerKind kind = LayerKind::kUnknown;
  double seconds = 0;
};

struct PlanningModel {
  const SimInput* in = nullptr;
  std::vector<Layer> layers;            // every phase, in op order
  std::vector<uint32_t> layer_of_op;
  uint32_t forward_end = 0;             // one past the last forward op
  // Per forward op: a block may start here. No value is written both before and at-or-after it in the forward
  // pass, so every value that crosses the cut is final (a recompute from it is exact). A write that does not
  // read its buffer starts a new value there.
  std::vector<bool> clean_cut;
  // The same with every buffer taken as one value: no buffer is written on both sides. Memory a caching allocator
  // hands from one tensor to the next holds several values in one forward pass; cuts between them are clean,
  // but a block that ends there is rebuilt over the next one's memory, which may hold a value still needed.
  std::vector<bool> buffer_cut;
  // Per buffer: non-persistent, used in the forward pass and again after it (what out-of-core methods evict).
  std::vector<bool> saved;
  std::vector<uint32_t> last_forward_use;  // per buffer, kNone when unused in forward
  std::vector<uint32_t> first_later_use;   // per buffer: first use at or after forward_end, kNone when none
  std::vector<std::vector<uint32_t>> writers;  // per buffer: the ops that write it, ascending
};
PlanningModel BuildPlanningModel(const SimInput& in);

// The forward ops to re-run right before op `before` so that each target holds its forward value again,
// in program order: from each target's writer back through the values it read, stopping at values that will be
// on the device then (`available[b]`, and persistent buffers, which recompute never changes) unless the
// application has freed them by then (those are rebuilt too). Fails when a needed value cannot be rebuilt (its
// writer is not recomputable) or has been changed since.
Result<std::vector<trace::OpId>> ResolveRecompute(const PlanningModel& m, const std::vector<trace::BufferId>& targets,
                                                  uint32_t before, const std::vector<bool>& available);
double SecondsOf(const PlanningModel& m, const std::vector<trace::OpId>& ops);

// ResolveRecompute for as many of the targets as can be rebuilt: a target that cannot (alone) is left out and
// reported as kept, and counts as available for the others.
struct RecomputeSet {
  std::vector<trace::OpId> ops;
  std::vector<trace::BufferId> rebuilt, kept;
};
RecomputeSet ResolveRecomputeKeeping(const PlanningModel& m, const std::vector<trace::BufferId>& targets,
                                     uint32_t before, std::vector<bool> available);

// An idle stretch of a buffer between two uses in the compute sequence, or (wrap) a persistent buffer's stretch
// from its last use to its first use in the next iteration: what a strategy may take off the device.
struct Gap {
  trace::BufferId buffer = trace::kNone;
  bool wrap = false;          // the whole gap around the iteration boundary: makes the buffer host-resident
  int32_t after = kAtStart;   // evicted after this op (not for wrap)
  uint32_t need = trace::kNone;  // restored before this op (not for wrap)
  // Compute items (ComputeSequence positions) where the buffer is off the device if restored at the last
  // moment: [lo1, hi1] and, for wrap gaps, also [lo2, hi2].
  int64_t lo1 = 0, hi1 = -1, lo2 = 0, hi2 = -1;
  uint64_t bytes = 0;
  int32_t prefetch_after = kSchedulePrefetch;  // the swap-in's anchor, when the caller fixes it
  int cls = 0;                // caller's priority class: lower first
  int64_t order = 0;          // caller's order within a class: lower first
};
// Every gap of at least one op, over the sequence the builder's recomputes give. Persistent buffers get their
// wrap gap and inner gaps (only when `wrap`), non-persistent ones their inner gaps; gaps the builder already
// evicts, and wrap gaps of buffers it already keeps on the host, are left out.
std::vector<Gap> FindGaps(const PlanningModel& m, const PlanBuilder& b, bool wrap);

// The most device bytes each compute item may take in StaticMemory terms: the capacity, except for a paged op
// (its working set exceeds the capacity) in a plan over managed memory: `target` is its own working set (nothing
// else on the device: the least paging), `hard` the capacity plus its working set less its operands that stay
// live after it (those must fit beside everything else once it ends).
struct ItemLimits {
  std::vector<uint64_t> target, hard;
};
ItemLimits CapacityLimits(const SimInput& in, const std::vector<ComputeItem>& seq, uint64_t capacity, bool managed);
bool WithinLimits(const std::vector<uint64_t>& mem, const std::vector<uint64_t>& limit);

// Capacity-based eviction: while the static memory (restores at the last moment) exceeds the limits, take off
// the device the gap that covers the item furthest above its target and comes first by (cls, order), and
// record it in the builder. A paged op left with other data beside it when no gap covers it more is accepted
// within its hard limit. Fails, saying where, when no gap covers an item above its hard limit.
Status EvictGreedily(const PlanningModel& m, PlanBuilder& b, std::vector<Gap> gaps, uint64_t capacity);
// Records one gap's eviction in the builder.
void ApplyGap(PlanBuilder& b, const Gap& g, int block = -1);
// Drops a saved value after its last forward use; a recompute in the builder rebuilds it for its next use.
void DropForRecompute(const PlanningModel& m, PlanBuilder& b, trace::BufferId x, int block = -1);

}  // namespace karma::policy
