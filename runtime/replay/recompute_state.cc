// The running program's recomputes: verdicts of their checks, kept across the programs of one recording, whether
// each is due, and the launches each re-runs.
#include "runtime/replay/recompute_state.h"

#include <algorithm>

#include "ground/common/log.h"

namespace karma::rt {

void RecomputeState::StartProgram(const ReplayProgram& p) {
  checks_.assign(p.recomputes.size(), Check::kUnvalidated);
  size_t known = 0;
  for (size_t r = 0; r < p.recomputes.size(); ++r) {
    const auto v = verdicts_.find(VerdictKey(p, p.recomputes[r]));
    if (v == verdicts_.end()) continue;
    checks_[r] = v->second;
    known++;
  }
  if (known != 0) KARMA_LOG(kInfo, "{} of the plan's recomputes were checked under an earlier plan", known);
  rejected_ops_.resize(p.period, false);
  launches_ = p.relaunch;
}

void RecomputeState::StartIteration(const ReplayProgram& p) {
  discarded_.assign(p.recomputes.size(), false);
  fresh_.assign(p.period, false);
  launches_.resize(p.period);
  for (uint32_t op = 0; op < p.period; ++op) {
    if (p.in_recompute[op]) launches_[op] = p.relaunch[op];  // until this iteration's launch replaces it
  }
}

void RecomputeState::Accept(const ReplayProgram& p, uint32_t r) {
  checks_[r] = Check::kValid;
  verdicts_[VerdictKey(p, p.recomputes[r])] = Check::kValid;
}

void RecomputeState::Reject(const ReplayProgram& p, uint32_t r) {
  const ReplayProgram::Recompute& rc = p.recomputes[r];
  checks_[r] = Check::kRejected;
  verdicts_[VerdictKey(p, rc)] = Check::kRejected;
  for (trace::OpId op : rc.ops) rejected_ops_[op] = true;
}

void RecomputeState::SetLaunch(uint32_t position, Relaunch launch) {
  if (position >= launches_.size() || launch == nullptr) return;
  launches_[position] = std::move(launch);
  fresh_[position] = true;
}

std::vector<uint64_t> RecomputeState::VerdictKey(const ReplayProgram& p, const ReplayProgram::Recompute& rc) {
  std::vector<uint64_t> key{p.period, rc.before, rc.ops.size()};
  for (trace::OpId op : rc.ops) {
    key.push_back(op);
    key.push_back(op < p.shape.size() ? p.shape[op] : 0);
  }
  auto add_set = [&](std::vector<trace::BufferId> ids) {
    std::sort(ids.begin(), ids.end());
    key.push_back(ids.size());
    key.insert(key.end(), ids.begin(), ids.end());
  };
  add_set(rc.targets);
  add_set(rc.scratch);
  return key;
}

}  // namespace karma::rt
