// Allocation sites: call stacks captured with libunwind when a buffer is allocated, symbolized only when a
// trace is written.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace karma::rt {

// Thread-safe. Identical stacks share one id.
class SiteTable {
 public:
  static constexpr int kMaxFrames = 24;
  // The caller's stack as a site id; 0 when libunwind is unavailable.
  uint32_t Capture();
  // Adds an already captured stack (innermost first); for tests and for stacks from elsewhere.
  uint32_t Intern(const void* const* pcs, int n);
  // "frame <- frame <- ...", innermost first, KARMA's own frames left out; "" for id 0 or unknown ids.
  std::string Describe(uint32_t id, int max_frames = 6) const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::vector<const void*>> stacks_;  // id - 1 -> frames
  std::unordered_map<uint64_t, std::vector<uint32_t>> by_hash_;
};

// libunwind's unw_backtrace, loaded privately on first use (its _Unwind_* exports must not replace the C++
// runtime's for the whole process, so it is never linked in); nullptr when it cannot be loaded.
using BacktraceFn = int (*)(void** buffer, int size);
BacktraceFn LoadBacktrace();

}  // namespace karma::rt
