// What the executor keeps of the running program's recomputes: whether each is trusted (its check's verdict),
// whether it is due in this iteration, and the launches it re-runs.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "runtime/replay/replay_program.h"

namespace karma::rt {

// A recompute is trusted to rebuild its targets once a check found its launches bit-exact (Executor, "Recompute
// validation"). Verdicts are kept across the programs of one recording (Forget, which a new recording follows): a
// recompute with the same launches, before the same op, with the same targets and scratch outputs sees the same
// input values whatever the plan around it (a plan moves values, never changes them), so a program that has it
// again (Planner II's, one planned for the measured link, the plan a trial went back to) does not check it again.
//
// Not thread-safe: the executor calls it under its lock (Executor::mu_).
class RecomputeState {
 public:
  enum class Check : uint8_t { kUnvalidated = 0, kValid = 1, kRejected = 2 };

  // A new program runs from this iteration on: its recomputes' verdicts where an earlier program had them (the
  // log says how many), its recorded launches.
  void StartProgram(const ReplayProgram& p);
  // A replayed iteration starts: no recompute is due, and the launches ops re-run are the recorded ones until this
  // iteration's replace them.
  void StartIteration(const ReplayProgram& p);
  // Forgets the verdicts (the next program belongs to another recording).
  void Forget() { verdicts_.clear(); }

  Check check(uint32_t r) const { return checks_[r]; }
  void Accept(const ReplayProgram& p, uint32_t r);
  // Rejects recompute r: its ops join rejected_ops().
  void Reject(const ReplayProgram& p, uint32_t r);
  // Ops of rejected recomputes across programs (a new plan leaves them out).
  const std::vector<bool>& rejected_ops() const { return rejected_ops_; }

  // Recompute r's targets were discarded in this iteration: it must run before they are used.
  void Discarded(uint32_t r) { discarded_[r] = true; }
  bool discarded(uint32_t r) const { return discarded_[r]; }
  // Whether recompute r was due, which it no longer is.
  bool TakeDiscarded(uint32_t r) {
    if (!discarded_[r]) return false;
    discarded_[r] = false;
    return true;
  }

  // This iteration's launch of the op at `position` (ignored where there is no such op).
  void SetLaunch(uint32_t position, Relaunch launch);
  const Relaunch& launch(trace::OpId op) const { return launches_[op]; }
  // Whether launch(op) was captured in this iteration (it holds this iteration's pointers, else the recording's).
  bool fresh(trace::OpId op) const { return fresh_[op]; }

 private:
  static std::vector<uint64_t> VerdictKey(const ReplayProgram& p, const ReplayProgram::Recompute& rc);

  std::vector<Check> checks_;                        // per recompute of the running program
  std::map<std::vector<uint64_t>, Check> verdicts_;  // keyed by VerdictKey
  std::vector<bool> rejected_ops_;
  std::vector<bool> discarded_;    // per recompute: its targets were discarded this iteration
  std::vector<Relaunch> launches_;  // per op: this iteration's launch (ops some recompute re-runs)
  std::vector<bool> fresh_;        // per op: launches_ was captured in this iteration
};

}  // namespace karma::rt
