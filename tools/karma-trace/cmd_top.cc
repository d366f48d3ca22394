// `karma-trace top PID`: the live statistics of a process running under libkarma.so, read from its
// shared-memory segment.
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "ground/common/live_stats.h"
#include "ground/common/units.h"
#include "tools/karma-trace/commands.h"

namespace bip = boost::interprocess;

namespace karma::tools {
namespace {

struct TopArgs {
  int64_t pid = 0;
  bool once = false;
  bool json = false;
  double interval = 1.0;
};

uint64_t Get(const live::Counter& c) { return c.load(std::memory_order_relaxed); }

double Percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

std::string Text(const live::Stats& s) {
  std::string out = fmt::format("karma pid {}: mode {}, {}, iteration {}", s.pid, s.mode,
                                live::StateName(s.state.load(std::memory_order_relaxed)), Get(s.iteration));
  if (Get(s.period_ops) != 0) out += fmt::format(" ({} ops each)", Get(s.period_ops));
  if (Get(s.recorded_iteration) != 0) out += fmt::format(", recorded iteration {}", Get(s.recorded_iteration));
  out += '\n';
  out += fmt::format("  budget   {} used of {} ({:.1f}%), peak {}; device {}; arena {} reserved\n",
                     FormatBytes(Get(s.used_bytes)), FormatBytes(Get(s.budget_bytes)),
                     Percent(Get(s.used_bytes), Get(s.budget_bytes)), FormatBytes(Get(s.peak_used_bytes)),
                     FormatBytes(Get(s.device_total_bytes)), FormatBytes(Get(s.arena_reserved_bytes)));
  out += fmt::format("  traffic  prefetched {} ({} hits, {} misses), evicted {}, discarded {}, recomputed {} kernels\n",
                     FormatBytes(Get(s.prefetched_bytes)), Get(s.prefetch_hits), Get(s.prefetch_misses),
                     FormatBytes(Get(s.evicted_bytes)), FormatBytes(Get(s.discarded_bytes)),
                     Get(s.recomputed_kernels));
  if (Get(s.measures_stalls) != 0) {
    out += fmt::format("  stalls   {:.1f}% of iteration time, {} faults\n", Percent(Get(s.stall_ns), Get(s.busy_ns)),
                       Get(s.faults));
    if (const uint64_t replayed = Get(s.replayed_iterations); replayed != 0) {
      out += fmt::format("  calls    managed-memory calls held the application {:.2f} ms of wall clock per replayed "
                         "iteration, the move threads {:.2f} ms ({} iterations)\n",
                         static_cast<double>(Get(s.app_move_ns)) / 1e6 / static_cast<double>(replayed),
                         static_cast<double>(Get(s.mover_move_ns)) / 1e6 / static_cast<double>(replayed), replayed);
    }
  } else {
    out += "  stalls   not measured (no plan replayed)\n";
  }
  out += fmt::format("  ops      {} intercepted, {} allocations, {} frees, {} divergences\n", Get(s.ops),
                     Get(s.allocations), Get(s.frees), Get(s.divergences));
  return out;
}

nlohmann::json Json(const live::Stats& s) {
  return {{"pid", s.pid},
          {"mode", s.mode},
          {"state", live::StateName(s.state.load(std::memory_order_relaxed))},
          {"iteration", Get(s.iteration)},
          {"period_ops", Get(s.period_ops)},
          {"recorded_iteration", Get(s.recorded_iteration)},
          {"device_total_bytes", Get(s.device_total_bytes)},
          {"budget_bytes", Get(s.budget_bytes)},
          {"used_bytes", Get(s.used_bytes)},
          {"peak_used_bytes", Get(s.peak_used_bytes)},
          {"arena_reserved_bytes", Get(s.arena_reserved_bytes)},
          {"prefetched_bytes", Get(s.prefetched_bytes)},
          {"prefetch_hits", Get(s.prefetch_hits)},
          {"prefetch_misses", Get(s.prefetch_misses)},
          {"evicted_bytes", Get(s.evicted_bytes)},
          {"discarded_bytes", Get(s.discarded_bytes)},
          {"recomputed_kernels", Get(s.recomputed_kernels)},
          {"stalls_measured", Get(s.measures_stalls) != 0},
          {"stall_ns", Get(s.stall_ns)},
          {"busy_ns", Get(s.busy_ns)},
          {"replayed_iterations", Get(s.replayed_iterations)},
          {"app_move_ns", Get(s.app_move_ns)},
          {"mover_move_ns", Get(s.mover_move_ns)},
          {"faults", Get(s.faults)},
          {"ops", Get(s.ops)},
          {"allocations", Get(s.allocations)},
          {"frees", Get(s.frees)},
          {"divergences", Get(s.divergences)}};
}

bool Alive(int64_t pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

int RunTop(const TopArgs& a) {
  const std::string name = live::SegmentName(a.pid);
  bip::shared_memory_object shm;
  bip::mapped_region region;
  try {
    shm = bip::shared_memory_object(bip::open_only, name.c_str(), bip::read_only);
    region = bip::mapped_region(shm, bip::read_only);
  } catch (const std::exception&) {
    return Fail(NotFound(fmt::format("no KARMA statistics for pid {} (segment {} not found: is the process running "
                                     "under libkarma.so with KARMA_LIVE=1, and yours?)",
                                     a.pid, name)));
  }
  if (region.get_size() < sizeof(uint64_t) + 2 * sizeof(uint32_t)) return Fail(Corrupt(name + " is too small"));
  const auto* s = static_cast<const live::Stats*>(region.get_address());
  if (s->magic != live::kMagic) return Fail(Corrupt(name + " is not a KARMA statistics segment"));
  if (s->version != live::kVersion || s->size != sizeof(live::Stats) || region.get_size() < sizeof(live::Stats)) {
    return Fail(Unsupported(fmt::format("{} has statistics version {}; this karma-trace reads version {}", name,
                                        s->version, live::kVersion)));
  }
  for (;;) {
    if (a.json) {
      fmt::print("{}\n", Json(*s).dump(2));
    } else {
      fmt::print("{}", Text(*s));
    }
    std::fflush(stdout);
    if (a.once) return kExitOk;
    std::this_thread::sleep_for(std::chrono::duration<double>(a.interval));
    if (!Alive(a.pid)) {
      fmt::print("process {} has exited\n", a.pid);
      return kExitOk;
    }
    if (!a.json) fmt::print("\n");
  }
}

}  // namespace

void RegisterTop(CLI::App& app, Action* selected) {
  auto args = std::make_shared<TopArgs>();
  CLI::App* sub = AddCommand(app, "top",
                             "Live statistics of a process running under libkarma.so: budget use, prefetch hits, "
                             "stalls, current iteration. Refreshes until the process exits.",
                             selected, [args] { return RunTop(*args); });
  sub->add_option("PID", args->pid, "the process id")->required()->check(CLI::PositiveNumber);
  sub->add_flag("--once", args->once, "print once and exit");
  sub->add_flag("--json", args->json, "print JSON objects instead of text");
  sub->add_option("--interval", args->interval, "seconds between refreshes (default 1)")
      ->check(CLI::Range(0.05, 3600.0));
}

}  // namespace karma::tools
