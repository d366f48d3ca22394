// The unified-memory baseline: no plan, on-demand paging of managed memory with LRU eviction.
#pragma once

#include "policy/simulator.h"

namespace karma::policy {

// Every buffer lives in managed memory split into 2 MiB pages (kManagedPageBytes). An op runs once all pages
// it touches are on the device; each missing page faults in (fault latency + page / fault bandwidth) while the
// op waits, and room is made by evicting the least recently used pages the op does not touch (each written back
// at the device-to-host rate). An op whose own pages exceed the capacity streams through them, evicting its
// own earliest pages. Pages of a buffer being created are populated in place (no migration); pages of a
// freed buffer are released. Two iterations run, and the second (steady state) is reported.
SimResult SimulateUnifiedMemory(const SimInput& in, const SimOptions& options = {});

}  // namespace karma::policy
