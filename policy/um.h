// The unified-memory baseline: no plan, on-demand paging of managed memory with LRU eviction.
#pragma once

#include "policy/simulator.h"

namespace karma::policy {

// Granularity of fault-driven migration and eviction: the UVM driver migrates 2 MiB regions.
inline constexpr uint64_t kUmPageBytes = 2ull << 20;

// Every buffer lives in managed memory split into 2 MiB pages. An op runs once all pages it touches are on the
// device; each missing page faults in (fault latency + page / fault bandwidth) while the op waits, and room is
// made by evicting the least recently used pages the op does not touch (each written back at the
// device-to-host rate). Pages of a buffer being created are populated in place (no migration); pages of a
// freed buffer are released. Two iterations run, and the second (steady state) is reported. Infeasible only
// when one op's own pages exceed the capacity.
SimResult SimulateUnifiedMemory(const SimInput& in, const SimOptions& options = {});

}  // namespace karma::policy
