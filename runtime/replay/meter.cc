// The replay's measurements: stalls, iteration and program times, the host link's rates, device residency, and the
// executor's pool of events.
#include "runtime/replay/meter.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace karma::rt {
namespace {

// The time from `a` to `b` in nanoseconds; false when either is missing or CUDA cannot tell.
bool ElapsedNs(const CudaApi& api, cudaEvent_t a, cudaEvent_t b, double* ns) {
  float ms = 0;
  if (a == nullptr || b == nullptr || api.cudaEventElapsedTime == nullptr) return false;
  if (api.cudaEventElapsedTime(&ms, a, b) != cudaSuccess) return false;
  *ns = static_cast<double>(ms) * 1e6;
  return true;
}

}  // namespace

void LinkMeter::Measure(const CudaApi& api, LastErrorScope& errors, bool final) {
  auto time_moves = [&](std::vector<Transfer>& moves) {
    for (const Transfer& t : moves) {
      double ns = 0;
      if (!ElapsedNs(api, t.started, t.done, &ns)) {
        errors.Failed();
        continue;
      }
      bytes_[t.to_device ? 0 : 1] += t.bytes;
      ns_[t.to_device ? 0 : 1] += std::max(ns, 0.0);
    }
    moves.clear();
  };
  if (to_measure_) {
    time_moves(transfers_to_measure_);
    iterations_++;
    to_measure_ = false;
  }
  if (final && timing_) {
    time_moves(transfers_);
    iterations_++;
    timing_ = false;
  }
}

void LinkMeter::Check() {
  if (done_ || iterations_ < kMinIterations) return;
  bool enough = true;
  for (size_t d = 0; d < 2; ++d) enough = enough && (bytes_[d] == 0 || bytes_[d] >= kMinBytes);
  if (!enough && iterations_ < kMaxIterations) return;
  done_ = true;
  timing_ = to_measure_ = false;
  transfers_.clear();
  transfers_to_measure_.clear();
  auto rate = [&](size_t d) {
    return bytes_[d] >= kMinBytes && ns_[d] > 0 ? static_cast<double>(bytes_[d]) * 1e9 / ns_[d] : 0.0;
  };
  rates_ = Rates{rate(0), rate(1), bytes_[0], bytes_[1], iterations_};
  if (rates_.h2d_bw > 0 || rates_.d2h_bw > 0) {
    measured_.store(true, std::memory_order_release);
  }
}

void LinkMeter::NextIteration() {
  transfers_to_measure_ = std::move(transfers_);
  transfers_.clear();
  to_measure_ = timing_;
  timing_ = false;
}

cudaEvent_t ReplayMeter::Event() {
  cudaEvent_t e = nullptr;
  if (!free_events_.empty()) {
    e = free_events_.back();
    free_events_.pop_back();
  } else if (api_.cudaEventCreateWithFlags == nullptr ||
             api_.cudaEventCreateWithFlags(&e, cudaEventDefault) != cudaSuccess) {
    return nullptr;
  }
  used_events_.push_back(e);
  return e;
}

ReplayMeter::IterationTag ReplayMeter::EndIteration(bool whole) {
  const IterationTag ended{serial_, replayed_, whole};
  if (ended.whole && replayed_ >= kTimedFrom && sampled_.samples != 0) {
    sampled_.iterations = 1;
    steady_.Merge(sampled_);
  }
  sampled_ = Residency{};
  return ended;
}

void ReplayMeter::StartProgram(const ReplayProgram& p) {
  serial_++;
  program_ns_.clear();
  replayed_ = 0;
  peak_position_ = static_cast<uint32_t>(std::max_element(p.planned_bytes.begin(), p.planned_bytes.end()) -
                                         p.planned_bytes.begin());
}

void ReplayMeter::NextIteration(live::Stats& stats) {
  Measure(stats, false);
  link_.Check();
  free_events_.insert(free_events_.end(), measured_events_.begin(), measured_events_.end());
  measured_events_ = std::move(used_events_);
  used_events_.clear();
  stalls_to_measure_ = std::move(stalls_);
  stalls_.clear();
  link_.NextIteration();
}

void ReplayMeter::StartReplayedIteration(cudaEvent_t start, const IterationTag& ended, const ReplayProgram& p,
                                         const ::karma::rt::Residency* residency) {
  busy_from_ = iteration_start_;
  busy_to_ = start;
  busy_tag_ = ended;
  iteration_start_ = start;
  // The first replayed iteration starts with whatever paging left on the device: residency is measured from the
  // second on (SampleBefore).
  ++replayed_;
  link_.TimeIteration(replayed_ > 1 && residency == nullptr);  // the first one's moves share the link with paging
}

void ReplayMeter::SampleDevice(uint32_t pos, const ReplayProgram* p, const ::karma::rt::Residency* residency) {
  size_t free = 0, total = 0;
  if (!RealMemGetInfo(api_, &free, &total)) return;
  const uint64_t used = total > free ? total - free : 0;
  live::RaiseTo(peak_device_, used);
  if (p == nullptr || pos >= p->planned_bytes.size()) return;
  // The copy path's pool stays full (dead values keep their chunks until needed): what it holds of live values.
  const uint64_t held = residency != nullptr ? residency->live_bytes() : used;
  const int64_t above = static_cast<int64_t>(held) - static_cast<int64_t>(p->planned_bytes[pos]);
  sampled_.Merge({.iterations = 0, .samples = 1, .peak = held, .above_min = above, .above_max = above,
                  .above_max_at = pos});
}

void ReplayMeter::Measure(live::Stats& stats, bool final) {
  LastErrorScope errors(api_);
  auto measure = [&](std::vector<StallEvents>& stalls) {
    for (const StallEvents& s : stalls) {
      double ns = 0;
      if (!ElapsedNs(api_, s.waiting, s.ready, &ns)) {
        errors.Failed();
        continue;
      }
      if (ns > 0) {
        stats.prefetch_misses.fetch_add(1, std::memory_order_relaxed);
        stats.stall_ns.fetch_add(static_cast<uint64_t>(std::llround(ns)), std::memory_order_relaxed);
      } else {
        stats.prefetch_hits.fetch_add(1, std::memory_order_relaxed);
      }
    }
    stalls.clear();
  };
  measure(stalls_to_measure_);
  link_.Measure(api_, errors, final);
  double busy = 0;
  if (ElapsedNs(api_, busy_from_, busy_to_, &busy)) {
    stats.busy_ns.fetch_add(static_cast<uint64_t>(std::llround(std::max(0.0, busy))), std::memory_order_relaxed);
    if (busy_tag_.whole && busy_tag_.serial == serial_ && busy_tag_.replayed >= kTimedFrom) {
      program_ns_.push_back(busy);
    }
  } else if (busy_from_ != nullptr) {
    errors.Failed();
  }
  busy_from_ = busy_to_ = nullptr;
  if (final) measure(stalls_);
}

void ReplayMeter::Flush(live::Stats& stats) {
  if (api_.cudaEventSynchronize != nullptr) {
    LastErrorScope errors(api_);
    for (const StallEvents& s : stalls_) {
      if (s.ready != nullptr && api_.cudaEventSynchronize(s.ready) != cudaSuccess) errors.Failed();
    }
  }
  Measure(stats, true);
}

ReplayMeter::ProgramTime ReplayMeter::program_time(std::shared_ptr<const ReplayProgram> running) const {
  ProgramTime t;
  t.serial = running != nullptr ? serial_ : 0;
  t.program = std::move(running);
  t.iterations = static_cast<uint32_t>(program_ns_.size());
  if (!program_ns_.empty()) {
    std::vector<double> sorted = program_ns_;
    std::sort(sorted.begin(), sorted.end());
    t.median_ns = sorted[sorted.size() / 2];
  }
  return t;
}

}  // namespace karma::rt
