// Finds the training iteration in the stream of operations: the period of the repeating op sequence and where
// an iteration starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace karma::rt {

// Each op is reduced to a signature (function, grid, block, and the registry buffers its pointers hit).
//
// Search: candidate periods are distances between an op and the last few earlier ops with the same signature.
// For each candidate p the detector counts, from the op that proposed it on, how many of the last p ops differ
// from the op p earlier; p is valid once it has seen p ops and (nearly) none differ, i.e. the last two p-long
// stretches are the same. A true period is proposed by the first op of the second iteration, so counting from
// there costs no time, and each op costs O(candidates), never a scan. The smallest valid candidate wins.
// A period must contain a kernel or library launch: a set-up loop of copies (uploading weights one tensor after
// another) repeats too, but it is not the training iteration.
// Where an iteration starts within the period: at the op before which the fewest bytes are live (training
// frees its activations between iterations), preferring an op that follows a host synchronization.
//
// Tracking: once locked, each op is compared with the op one period earlier. More differences within one
// iteration than the tolerance allows is a divergence: the lock is dropped and the search resumes. A period
// that diverges before it has survived `confirm_periods` iterations is banned until it has been valid for two
// more periods in a row, so that a repeated sub-sequence (identical layers, gradient-accumulation micro-steps)
// does not keep winning over the real iteration. The caller should record only once stable().
//
// Rejection: a period whose replay kept diverging (Reject) is not the iteration. A layer that synchronizes with
// the host (a data-parallel program waiting for each layer's gradient before its exchange) satisfies
// `require_sync` and repeats many times in a row, so it locks before the iteration does. A rejected period p is
// never chosen again, and neither is a multiple of it unless that candidate stayed valid across p's latest
// mismatch: two layers repeat exactly where one does and break where it breaks, whereas the iteration (whose
// length may be a multiple of p too) repeats across the point where the layers end. Rejections survive Reset and
// last for the first 16 p + 4096 ops after it: a period rejected because the application changed its iteration
// (new shapes, same length) is found again once nothing else has locked by then.
class IterationDetector {
 public:
  struct Options {
    uint32_t min_period = 4;
    uint32_t max_period = 200000;
    double tolerance = 0.01;        // share of a period's ops that may differ from the previous iteration
    uint32_t confirm_periods = 2;   // iterations a lock must survive before stable()
    uint32_t max_candidates = 16;
    // A period must contain a host synchronization (an application that waits for every iteration's loss):
    // with signatures that cannot tell identical layers apart, a layer would repeat as well as the iteration.
    bool require_sync = false;
  };
  enum class Step {
    kSearching,  // no period yet
    kLocked,     // a period was found at this op; the next boundary lies ahead
    kInside,     // within an iteration of the locked period
    kBoundary,   // this op starts an iteration
    kDiverged,   // this op broke the locked period
  };

  IterationDetector() : IterationDetector(Options{}) {}
  explicit IterationDetector(Options options);

  // Feeds the next op, before it runs: its signature, the bytes allocated before it (not counting what was
  // allocated since the previous op, which belongs to this op's iteration), whether the host
  // synchronized with the device since the previous op, and whether it is a launch (kernel or library call) rather
  // than a copy or memset.
  Step Observe(uint64_t signature, uint64_t live_bytes, bool after_sync, bool launch = true);

  // The period p is not the iteration (see "Rejection" above).
  void Reject(uint64_t p);
  // Detection from scratch, keeping the rejected periods.
  void Reset();

  bool locked() const { return locked_; }
  uint64_t period() const { return locked_ ? period_ : 0; }
  // Iteration boundaries passed since the lock (the first boundary counts 1).
  uint64_t boundaries() const { return boundaries_; }
  bool stable() const { return locked_ && boundaries_ > options_.confirm_periods; }
  uint64_t ops() const { return n_; }
  uint64_t divergences() const { return divergences_; }
  size_t candidate_count() const { return candidates_.size(); }

 private:
  struct Candidate {
    uint64_t period = 0;
    uint64_t since = 0;       // the op that proposed it: ops before are not counted
    uint64_t mismatches = 0;  // among the counted ops of the window (n - p, n]
    uint64_t valid_run = 0;   // consecutive ops at which the window was valid
    bool banned = false;
  };
  uint64_t Sig(uint64_t i) const { return sig_[i % capacity_]; }
  bool Mismatch(uint64_t i, uint64_t p) const { return i < p || Sig(i) != Sig(i - p); }
  uint64_t Allowed(uint64_t p) const;
  void EvictOne();
  Step Lock(uint64_t p, uint64_t i);
  // True when the last p ops repeat with a period shorter than the minimum (one op over and over): such a
  // stretch is a loop, not an iteration.
  bool Degenerate(uint64_t p, uint64_t i) const;
  // True when ops (i - p, i] include a launch; a synchronization.
  bool HasLaunch(uint64_t p, uint64_t i) const;
  bool HasSync(uint64_t p, uint64_t i) const;
  // Whether candidate c may be chosen at op i given the rejected periods.
  bool Admissible(const Candidate& c, uint64_t i) const;

  Options options_;
  uint64_t capacity_;              // history kept: two periods of the longest candidate
  std::vector<uint64_t> sig_;      // ring buffers over op indices
  std::vector<uint64_t> live_;
  std::vector<uint8_t> sync_;
  std::vector<uint64_t> launches_;  // launches among ops [0, i], for op i
  std::vector<uint64_t> syncs_;     // ops among [0, i] that follow a synchronization, for op i
  uint64_t n_ = 0;
  // The latest occurrences of signatures, in a direct-mapped table: no allocation per op, and a signature whose
  // slot another one took only loses its proposals until it occurs again.
  struct Seen {
    uint64_t signature = 0;
    uint64_t index[4] = {};  // the latest occurrences, oldest first
    uint32_t count = 0;
  };
  static constexpr size_t kSeenSlots = 1u << 17;
  std::vector<Seen> last_seen_;
  std::vector<Candidate> candidates_;  // a few dozen at most: a flat scan beats a tree
  Candidate* FindCandidate(uint64_t p);
  std::unordered_map<uint64_t, uint64_t> evicted_at_;              // period -> index when evicted

  bool locked_ = false;
  uint64_t period_ = 0;
  uint64_t next_boundary_ = 0;
  uint64_t boundaries_ = 0;
  uint64_t iteration_mismatches_ = 0;
  uint64_t divergences_ = 0;
  // Rejected periods with the latest op at which each mismatched the op one period earlier (UINT64_MAX: none yet).
  struct Rejected {
    uint64_t period = 0;
    uint64_t last_mismatch = UINT64_MAX;
  };
  std::vector<Rejected> rejected_;
};

}  // namespace karma::rt
