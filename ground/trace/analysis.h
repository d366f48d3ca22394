// Derived facts about an iteration: buffer lifetimes, the ideal in-core memory curve, and summary counts.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "ground/trace/model.h"

namespace karma::trace {

// When a buffer holds data the iteration needs.
struct Lifetime {
  bool persistent = false;   // lives for the whole iteration and across iterations
  uint32_t first = kNone;    // first op that uses it (kNone: never used)
  uint32_t last = kNone;     // last op that uses it
};

// The karma-graph lifetime rules (../shared/formats/karma-graph.md), extended to recorded traces:
// param/input/grad/state buffers are persistent, and so is any buffer read (or touched) before any
// op writes it, unless the trace shows it allocated inside the iteration. Every other buffer lives
// from its first use to its last.
std::vector<Lifetime> ComputeLifetimes(const Iteration& it);

// Live bytes while each op runs when every non-persistent buffer is allocated at its first use and
// freed right after its last: the ideal in-core footprint.
struct MemoryCurve {
  uint64_t persistent_bytes = 0;
  std::vector<uint64_t> live;  // live[i]: bytes live while op i runs, persistent included
  uint64_t peak_bytes = 0;     // max of live (persistent_bytes for an empty iteration)
  uint32_t peak_op = kNone;
};
MemoryCurve IdealMemory(const Iteration& it, const std::vector<Lifetime>& lifetimes);

// Live bytes while each op runs as the application holds its memory: a buffer it allocates inside the iteration
// lives from its first use until it frees it (to the end of the iteration when it frees it later), however long
// after its last use that is; every other buffer as in IdealMemory. Equal to the ideal curve when every free follows
// the last use at once, and for iterations without alloc events (a karma-graph file, memory the application keeps).
// A buffer allocated inside with no use seen counts in neither curve. libkarma.so's planning iteration already
// holds a buffer freed later inside the iteration until its free (rt::PlanningIteration), so there the late
// buffers left are those the application frees only in a later iteration.
struct HeldMemoryCurve {
  MemoryCurve memory;
  uint64_t late_buffers = 0;     // buffers freed more than one op after their last use, or not inside the iteration
  uint64_t most_late_bytes = 0;  // the most bytes of those held past their last use while one op runs
  std::vector<uint32_t> held_until;  // per buffer: the last op it is held through when later than its last use,
                                     // else kNone
};
HeldMemoryCurve HeldMemory(const Iteration& it, const std::vector<Lifetime>& lifetimes);

struct KindTotals {
  uint64_t count = 0;
  uint64_t bytes = 0;
};

struct Summary {
  std::array<uint64_t, kPhaseCount> ops_by_phase{};
  std::array<uint64_t, kOpKindCount> ops_by_kind{};
  std::array<KindTotals, kBufferKindCount> buffers_by_kind{};
  uint64_t total_flops = 0;
  uint64_t total_op_bytes = 0;
  uint64_t measured_ns = 0;       // sum of measured durations
  uint64_t ops_with_duration = 0;
  uint64_t buffer_bytes = 0;      // sum of all buffer sizes
  MemoryCurve memory;
  HeldMemoryCurve held;
};
Summary Summarize(const Iteration& it);

}  // namespace karma::trace
