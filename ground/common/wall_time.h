// Wall-clock time of a scope, added to a counter when the scope ends: what a call of KARMA's costs the thread that
// makes it (reported in logs and the live view; never in tests, which use virtual time).
#pragma once

#include <chrono>
#include <cstdint>

namespace karma {

inline uint64_t NsSince(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

// `Counter` is an integer or an atomic one (`+=`).
template <typename Counter>
class AddWallNs {
 public:
  explicit AddWallNs(Counter& counter) : counter_(counter), start_(std::chrono::steady_clock::now()) {}
  ~AddWallNs() { counter_ += NsSince(start_); }
  AddWallNs(const AddWallNs&) = delete;
  AddWallNs& operator=(const AddWallNs&) = delete;

 private:
  Counter& counter_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace karma
