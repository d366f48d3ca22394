// Publishing the session's statistics in a shared-memory segment for `karma-trace top`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ground/common/live_stats.h"
#include "ground/common/status.h"

namespace karma::rt {

// Owns the segment karma-<pid> (owner-only permissions) with one live::Stats in it; removes it when destroyed.
class LiveView {
 public:
  static Result<std::unique_ptr<LiveView>> Create(int64_t pid);
  ~LiveView();
  LiveView(const LiveView&) = delete;
  LiveView& operator=(const LiveView&) = delete;

  live::Stats* stats() { return stats_; }
  const std::string& name() const { return name_; }
  // Removes the segment now (the mapping stays valid until destruction); used at exit.
  void Unlink();

 private:
  struct Impl;
  LiveView(std::unique_ptr<Impl> impl, live::Stats* stats, std::string name);
  std::unique_ptr<Impl> impl_;
  live::Stats* stats_;
  std::string name_;
  bool linked_ = true;
};

}  // namespace karma::rt
