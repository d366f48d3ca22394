// Evaluating every strategy on one model graph at one memory pressure, and the summary figures the issue asks for.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "policy/access.h"
#include "policy/checker.h"
#include "policy/cost_model.h"
#include "policy/strategies.h"
#include "ground/trace/analysis.h"

namespace karma::policy {

struct StrategyEval {
  bool feasible = false;
  std::string reason;
  double iteration_s = 0;
  uint64_t peak_bytes = 0;
  Status check;  // the independent checker's verdict on an accepted plan
};

struct WorkloadEval {
  std::string model;
  double k = 0;
  uint64_t capacity = 0;
  double ideal_s = 0;
  uint64_t op_floor = 0;  // the most bytes one op touches: no tensor-granularity plan fits below it
  std::map<std::string, StrategyEval> by_strategy;
  const StrategyEval& karma() const { return by_strategy.at("karma"); }
};

// capacity = ideal in-core peak / k on the paper's V100.
inline WorkloadEval EvaluateWorkload(const trace::Iteration& it, double k, bool check) {
  WorkloadEval e;
  e.model = it.model;
  e.k = k;
  e.capacity = static_cast<uint64_t>(
      static_cast<double>(trace::IdealMemory(it, trace::ComputeLifetimes(it)).peak_bytes) / k);
  const SimInput in = MakeSimInput(it, DefaultProfile(), e.capacity);
  e.op_floor = FindLargestOp(it, in.access).bytes;
  e.ideal_s = IdealSeconds(in.op_seconds);
  for (const StrategyInfo& s : AllStrategies()) {
    const Evaluation ev = Evaluate(s.name, in, {.record_events = check});
    StrategyEval r;
    r.feasible = ev.feasible;
    r.reason = ev.reason;
    r.iteration_s = ev.sim.iteration_s;
    r.peak_bytes = ev.sim.peak_bytes;
    if (check && ev.feasible && s.has_plan) r.check = CheckSchedule(in, ev.plan, ev.sim);
    e.by_strategy[s.name] = std::move(r);
  }
  return e;
}

struct KarmaSummary {
  int karma_feasible = 0;
  double speedup_over_best_old = 0;  // geometric mean of (best of vdnn, superneurons, um) / karma
  double slowdown_vs_incore_k2 = 0;  // geometric mean of karma / in-core at k = 2
  double slowdown_vs_incore = 0;     // over every configuration where karma is feasible
};

inline KarmaSummary Summarize(const std::vector<WorkloadEval>& evals) {
  KarmaSummary s;
  double log_old = 0, log_k2 = 0, log_all = 0;
  int n_old = 0, n_k2 = 0;
  for (const WorkloadEval& e : evals) {
    if (!e.karma().feasible) continue;
    ++s.karma_feasible;
    const double t = e.karma().iteration_s;
    log_all += std::log(t / e.ideal_s);
    if (e.k == 2) {
      log_k2 += std::log(t / e.ideal_s);
      ++n_k2;
    }
    double best = 0;
    for (const char* n : {"vdnn", "superneurons", "um"}) {
      const StrategyEval& o = e.by_strategy.at(n);
      if (o.feasible && (best == 0 || o.iteration_s < best)) best = o.iteration_s;
    }
    if (best > 0) {
      log_old += std::log(best / t);
      ++n_old;
    }
  }
  s.speedup_over_best_old = n_old ? std::exp(log_old / n_old) : 0;
  s.slowdown_vs_incore_k2 = n_k2 ? std::exp(log_k2 / n_k2) : 0;
  s.slowdown_vs_incore = s.karma_feasible ? std::exp(log_all / s.karma_feasible) : 0;
  return s;
}

}  // namespace karma::policy
