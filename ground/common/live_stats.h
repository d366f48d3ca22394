// The layout of the live statistics a running libkarma.so publishes in shared memory (named by its pid) and
// `karma-trace top PID` reads: shared by writer and reader like the .ktrace format header.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

namespace karma::live {

inline constexpr uint64_t kMagic = 0x5649'4c41'4d52'414bull;  // "KARMALIV" little-endian
// Bump for any change a reader of the previous version would misread; readers refuse other versions.
inline constexpr uint32_t kVersion = 2;

// Values are stored: append, never renumber.
enum class State : uint32_t {
  kStarting = 0, kDetecting = 1, kRecording = 2, kRecorded = 3, kUm = 4, kReplaying = 5, kPassThrough = 6,
};
const char* StateName(uint32_t state);

using Counter = std::atomic<uint64_t>;
static_assert(Counter::is_always_lock_free, "the shared counters must be lock-free to work across processes");

// Raises `c` to `v` if `v` is larger (a peak), with relaxed atomics.
inline void RaiseTo(Counter& c, uint64_t v) {
  uint64_t now = c.load(std::memory_order_relaxed);
  while (v > now && !c.compare_exchange_weak(now, v, std::memory_order_relaxed)) {
  }
}

// Every counter is written by the process with relaxed atomics and read the same way by other processes.
struct Stats {
  uint64_t magic = kMagic;
  uint32_t version = kVersion;
  uint32_t size = sizeof(Stats);
  int64_t pid = 0;
  char mode[16] = {};                    // KARMA_MODE in effect, NUL-terminated
  std::atomic<uint32_t> state{0};        // a State
  uint32_t reserved = 0;
  Counter device_total_bytes{0};
  Counter budget_bytes{0};               // KARMA_CAPACITY resolved
  Counter arena_reserved_bytes{0};
  Counter used_bytes{0};                 // device allocations the application holds (arena + passed through)
  Counter peak_used_bytes{0};
  Counter prefetched_bytes{0};
  Counter evicted_bytes{0};
  Counter discarded_bytes{0};
  Counter recomputed_kernels{0};
  Counter prefetch_hits{0};              // planned prefetches that completed before the op needed them
  Counter prefetch_misses{0};
  Counter faults{0};
  Counter stall_ns{0};                   // time the application's streams waited for KARMA's copies
  Counter busy_ns{0};                    // time of the iterations those stalls are measured against
  Counter iteration{0};                  // iterations seen (detected boundaries or markers)
  Counter period_ops{0};                 // ops per iteration once detected
  Counter ops{0};                        // kernels, library calls, copies and memsets intercepted
  Counter allocations{0};
  Counter frees{0};
  Counter divergences{0};
  Counter recorded_iteration{0};         // the iteration written as a trace (0: none yet)
  Counter measures_stalls{0};            // 1 when faults/stalls are measured (the replay executor runs)
  Counter replayed_iterations{0};        // iterations that started with a plan to replay
  Counter app_move_ns{0};                // wall time the application's threads spent in KARMA's managed-memory
                                         // calls (prefetch, evict, discard) and waiting for the mover threads
  Counter mover_move_ns{0};              // wall time the mover threads spent in those calls (KARMA_MOVE_THREADS=1)
};
static_assert(std::is_standard_layout_v<Stats>);

inline std::string SegmentName(int64_t pid) { return "karma-" + std::to_string(pid); }

inline const char* StateName(uint32_t state) {
  switch (static_cast<State>(state)) {
    case State::kStarting: return "starting";
    case State::kDetecting: return "detecting";
    case State::kRecording: return "recording";
    case State::kRecorded: return "recorded";
    case State::kUm: return "um";
    case State::kReplaying: return "replaying";
    case State::kPassThrough: return "pass-through";
  }
  return "unknown";
}

}  // namespace karma::live
