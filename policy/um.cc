// Fault-driven paging of managed memory, page by page, with least-recently-used eviction.
#include "policy/um.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "policy/cost_model.h"
#include "ground/common/units.h"

namespace karma::policy {
namespace {

struct Page {
  trace::BufferId buffer;
  uint64_t bytes;
  bool resident = false;
  uint64_t last_touch = 0;
};

}  // namespace

SimResult SimulateUnifiedMemory(const SimInput& in, const SimOptions& options) {
  const trace::Iteration& it = *in.it;
  const AccessModel& acc = in.access;
  SimResult r;
  r.sequence.reserve(it.ops.size());
  for (uint32_t op = 0; op < it.ops.size(); ++op) r.sequence.push_back({op, trace::kNone, {}});

  std::vector<Page> pages;
  std::vector<std::pair<size_t, size_t>> range(it.buffers.size());  // pages [first, second) of each buffer
  for (size_t b = 0; b < it.buffers.size(); ++b) {
    range[b].first = pages.size();
    for (uint64_t off = 0; off < it.buffers[b].bytes; off += kManagedPageBytes) {
      pages.push_back({static_cast<trace::BufferId>(b), std::min(kManagedPageBytes, it.buffers[b].bytes - off)});
    }
    range[b].second = pages.size();
  }
  std::set<std::pair<uint64_t, size_t>> lru;  // (last touch, page) of resident pages
  uint64_t used = 0, clock = 1;
  auto make_resident = [&](size_t p) {
    pages[p].resident = true;
    pages[p].last_touch = clock;
    lru.insert({clock, p});
    used += pages[p].bytes;
  };
  auto release = [&](size_t p) {
    if (!pages[p].resident) return;
    lru.erase({pages[p].last_touch, p});
    pages[p].resident = false;
    used -= pages[p].bytes;
  };
  // Persistent data starts on the device as far as it fits, the rest in host memory.
  for (size_t b = 0; b < it.buffers.size(); ++b) {
    if (!acc.persistent[b]) continue;
    for (size_t p = range[b].first; p < range[b].second; ++p) {
      if (used + pages[p].bytes <= in.capacity) make_resident(p);
    }
  }
  std::vector<uint32_t> last_use(it.buffers.size(), trace::kNone);
  for (size_t b = 0; b < it.buffers.size(); ++b) {
    if (!acc.uses[b].empty()) last_use[b] = acc.uses[b].back();
  }

  double now = 0;
  for (int iteration = 0; iteration < 2; ++iteration) {
    const bool measured = iteration == 1;
    std::vector<bool> created(it.buffers.size(), false);
    for (size_t b = 0; b < it.buffers.size(); ++b) created[b] = acc.persistent[b];
    if (measured) {
      now = 0;
      r.peak_bytes = used;
      if (options.record_memory) r.memory.emplace_back(0.0, used);
    }
    for (uint32_t op = 0; op < it.ops.size(); ++op) {
      const OpAccess& a = acc.ops[op];
      std::vector<trace::BufferId> touched = a.reads;
      for (trace::BufferId b : a.writes) {
        if (std::find(touched.begin(), touched.end(), b) == touched.end()) touched.push_back(b);
      }
      uint64_t own = 0;
      for (trace::BufferId b : touched) own += it.buffers[b].bytes;
      // An op whose pages exceed the capacity streams through them: each page touched in turn becomes the most
      // recent, and its own earliest pages are evicted to make room for its later ones.
      const bool streams = own > in.capacity;
      auto touch = [&](size_t p) {
        lru.erase({pages[p].last_touch, p});
        pages[p].last_touch = clock;
        lru.insert({clock, p});
      };
      ++clock;
      // Otherwise, protect this op's pages from eviction while its faults are served.
      for (trace::BufferId b : touched) {
        for (size_t p = range[b].first; p < range[b].second && !streams; ++p) {
          if (pages[p].resident) touch(p);
        }
      }
      double fault_s = 0, evict_s = 0;
      for (trace::BufferId b : touched) {
        const bool migrate = created[b];
        for (size_t p = range[b].first; p < range[b].second; ++p) {
          if (streams) ++clock;
          if (pages[p].resident) {
            if (streams) touch(p);
            continue;
          }
          while (used + pages[p].bytes > in.capacity) {
            if (lru.empty()) {
              r.feasible = false;
              r.reason = fmt::format("the capacity {} is below one page", FormatBytes(in.capacity));
              return r;
            }
            const size_t victim = lru.begin()->second;  // the op's own pages are the most recent
            evict_s += static_cast<double>(pages[victim].bytes) / in.hw.managed.d2h_bw;
            if (measured) r.swap_out_bytes += pages[victim].bytes;
            release(victim);
          }
          if (migrate) {
            fault_s += in.hw.fault_latency_s + static_cast<double>(pages[p].bytes) / in.hw.fault_bw;
            if (measured) r.swap_in_bytes += pages[p].bytes;
          }
          make_resident(p);
        }
        created[b] = true;
      }
      if (measured) {
        if (streams) r.paged_ops++;
        r.stall_s += fault_s + evict_s;
        r.h2d_busy_s += fault_s;
        r.d2h_busy_s += evict_s;
        now += fault_s + evict_s;
        r.peak_bytes = std::max(r.peak_bytes, used);
        if (options.record_events) r.events.push_back({SimEvent::kComputeStart, now, op});
        now += in.op_seconds[op];
        r.compute_s += in.op_seconds[op];
        if (options.record_events) r.events.push_back({SimEvent::kComputeEnd, now, op});
      }
      for (trace::BufferId b : touched) {
        if (acc.persistent[b] || last_use[b] != op) continue;
        for (size_t p = range[b].first; p < range[b].second; ++p) release(p);
      }
      if (measured && options.record_memory) r.memory.emplace_back(now, used);
    }
  }
  r.feasible = true;
  r.iteration_s = now;
  return r;
}

}  // namespace karma::policy
