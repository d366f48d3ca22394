// Iteration detection: candidate periods from repeated signatures, sliding-window validation, tracking.
#include "runtime/observe/detector.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace karma::rt {
namespace {

// Earlier occurrences of a signature that propose candidate periods. One is not enough: when every op of an
// iteration occurs more than once in it, only a distance to an older occurrence equals the period.
constexpr uint32_t kOccurrences = 4;

}  // namespace

IterationDetector::IterationDetector(Options options)
    : options_(options), capacity_(2ull * std::max<uint32_t>(options.max_period, 1) + 2) {}

uint64_t IterationDetector::Allowed(uint64_t p) const {
  return static_cast<uint64_t>(std::floor(options_.tolerance * static_cast<double>(p)));
}

IterationDetector::Candidate* IterationDetector::FindCandidate(uint64_t p) {
  for (Candidate& c : candidates_) {
    if (c.period == p) return &c;
  }
  return nullptr;
}

void IterationDetector::EvictOne() {
  size_t worst = candidates_.size();
  double worst_ratio = -1;
  for (size_t k = 0; k < candidates_.size(); ++k) {
    const Candidate& c = candidates_[k];
    if (locked_ && c.period == period_) continue;
    const double ratio = static_cast<double>(c.mismatches) / static_cast<double>(c.period);
    if (ratio >= worst_ratio) {
      worst_ratio = ratio;
      worst = k;
    }
  }
  if (worst == candidates_.size()) return;
  if (evicted_at_.size() > 4096) evicted_at_.clear();
  evicted_at_[candidates_[worst].period] = n_;
  candidates_[worst] = candidates_.back();
  candidates_.pop_back();
}

void IterationDetector::Reject(uint64_t p) {
  if (p == 0) return;
  for (const Rejected& r : rejected_) {
    if (r.period == p) return;
  }
  rejected_.push_back({p, UINT64_MAX});
}

void IterationDetector::Reset() {
  std::vector<Rejected> rejected = std::move(rejected_);
  *this = IterationDetector(options_);
  for (Rejected& r : rejected) r.last_mismatch = UINT64_MAX;  // the history they refer to is gone
  rejected_ = std::move(rejected);
}

bool IterationDetector::Admissible(const Candidate& c, uint64_t i) const {
  for (const Rejected& r : rejected_) {
    if (i >= 16 * r.period + 4096) continue;  // expired
    if (c.period == r.period) return false;
    if (c.period % r.period != 0) continue;
    // A multiple of a rejected period: only once it has held across a point where the rejected one broke.
    if (r.last_mismatch == UINT64_MAX || c.valid_run <= i - r.last_mismatch) return false;
  }
  return true;
}

bool IterationDetector::Degenerate(uint64_t p, uint64_t i) const {
  for (uint64_t d = 1; d < options_.min_period && d < p; ++d) {
    if (p % d != 0) continue;
    bool periodic = true;
    for (uint64_t j = i + 1 - p + d; j <= i && periodic; ++j) periodic = Sig(j) == Sig(j - d);
    if (periodic) return true;
  }
  return false;
}

bool IterationDetector::HasLaunch(uint64_t p, uint64_t i) const {
  const uint64_t before = i >= p ? launches_[(i - p) % capacity_] : 0;
  return launches_[i % capacity_] > before;
}

bool IterationDetector::HasSync(uint64_t p, uint64_t i) const {
  const uint64_t before = i >= p ? syncs_[(i - p) % capacity_] : 0;
  return syncs_[i % capacity_] > before;
}

IterationDetector::Step IterationDetector::Lock(uint64_t p, uint64_t i) {
  locked_ = true;
  period_ = p;
  boundaries_ = 0;
  iteration_mismatches_ = 0;
  // The iteration starts where the least memory is live; then after a synchronization; then earliest.
  uint64_t best = i;
  auto key = [&](uint64_t j) { return std::make_tuple(live_[j % capacity_], sync_[j % capacity_] ? 0 : 1, j); };
  for (uint64_t j = i + 1 - p; j <= i; ++j) {
    if (key(j) < key(best)) best = j;
  }
  next_boundary_ = best == i ? i : best + p;
  if (next_boundary_ == i) {
    next_boundary_ += p;
    boundaries_ = 1;
    return Step::kBoundary;
  }
  return Step::kLocked;
}

IterationDetector::Step IterationDetector::Observe(uint64_t signature, uint64_t live_bytes, bool after_sync,
                                                   bool launch) {
  const uint64_t i = n_++;
  const uint64_t launches = (i == 0 ? 0 : launches_[(i - 1) % capacity_]) + (launch ? 1 : 0);
  const uint64_t syncs = (i == 0 ? 0 : syncs_[(i - 1) % capacity_]) + (after_sync ? 1 : 0);
  if (sig_.size() < capacity_) {
    sig_.push_back(signature);
    live_.push_back(live_bytes);
    sync_.push_back(after_sync ? 1 : 0);
    launches_.push_back(launches);
    syncs_.push_back(syncs);
  } else {
    sig_[i % capacity_] = signature;
    live_[i % capacity_] = live_bytes;
    sync_[i % capacity_] = after_sync ? 1 : 0;
    launches_[i % capacity_] = launches;
    syncs_[i % capacity_] = syncs;
  }

  for (Rejected& r : rejected_) {
    if (i >= r.period && Sig(i) != Sig(i - r.period)) r.last_mismatch = i;
  }

  // Slide every candidate's window by one op. A candidate is proposed at an index >= its period, so every op it
  // counts has an op one period earlier.
  for (Candidate& c : candidates_) {
    const uint64_t p = c.period;
    c.mismatches += Mismatch(i, p) ? 1 : 0;
    if (i >= c.since + p) c.mismatches -= Mismatch(i - p, p) ? 1 : 0;
    const bool valid = i + 1 >= c.since + p && c.mismatches <= Allowed(p);
    c.valid_run = valid ? c.valid_run + 1 : 0;
    if (c.banned && c.valid_run > 2 * p) c.banned = false;
  }

  // New candidates: distances to the latest earlier occurrences of this signature.
  if (last_seen_.empty()) last_seen_.resize(kSeenSlots);
  Seen& seen = last_seen_[(signature ^ (signature >> 29)) & (kSeenSlots - 1)];
  if (seen.signature != signature || seen.count == 0) {
    seen.signature = signature;
    seen.count = 0;
  }
  for (uint32_t k = 0; k < seen.count; ++k) {
    const uint64_t p = i - seen.index[k];
    if (p < options_.min_period || p > options_.max_period || FindCandidate(p) != nullptr) continue;
    auto ev = evicted_at_.find(p);
    if (ev != evicted_at_.end() && i < ev->second + p) continue;
    // This op repeats the one p earlier by construction: counted, and no mismatch.
    Candidate c;
    c.period = p;
    c.since = i;
    candidates_.push_back(c);
  }
  static_assert(sizeof(Seen::index) / sizeof(uint64_t) == kOccurrences);
  if (seen.count == kOccurrences) {
    for (uint32_t k = 1; k < kOccurrences; ++k) seen.index[k - 1] = seen.index[k];
    seen.count--;
  }
  seen.index[seen.count++] = i;
  while (candidates_.size() > options_.max_candidates) EvictOne();

  if (locked_) {
    if (i >= period_ && Sig(i) != Sig(i - period_)) iteration_mismatches_++;
    if (iteration_mismatches_ > Allowed(period_)) {
      locked_ = false;
      divergences_++;
      Candidate* c = FindCandidate(period_);
      if (c != nullptr && boundaries_ <= options_.confirm_periods) {
        c->banned = true;
        c->valid_run = 0;
      }
      return Step::kDiverged;
    }
    if (i == next_boundary_) {
      next_boundary_ += period_;
      boundaries_++;
      iteration_mismatches_ = 0;
      return Step::kBoundary;
    }
    return Step::kInside;
  }

  const Candidate* best = nullptr;
  for (const Candidate& c : candidates_) {
    if (c.banned || c.valid_run == 0 || (best != nullptr && c.period >= best->period) || !Admissible(c, i)) continue;
    if (HasLaunch(c.period, i) && (!options_.require_sync || HasSync(c.period, i)) && !Degenerate(c.period, i)) {
      best = &c;
    }
  }
  return best != nullptr ? Lock(best->period, i) : Step::kSearching;
}

}  // namespace karma::rt
