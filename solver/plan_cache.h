// The plan cache: a karma plan stored under a fingerprint of its inputs and solver settings, loaded on a rerun.
#pragma once

#include <string>

#include "policy/plan.h"
#include "policy/simulator.h"
#include "solver/planner.h"

namespace karma::solver {

// Bumped whenever planning changes what it returns for the same inputs, so that older cached plans are not used.
inline constexpr int kPlannerVersion = 10;

// KARMA_PLAN_CACHE when set ("off": no cache, returns ""), else $XDG_CACHE_HOME/karma/plans, else
// $HOME/.cache/karma/plans ("" when neither is set).
std::string DefaultPlanCacheDir();

// "<policy::Fingerprint of trace, profile and capacity>-<hash of the solver settings and kPlannerVersion>".
std::string PlanCacheKey(const policy::SimInput& in, const SolverOptions& options);

struct CacheOutcome {
  bool enabled = false;
  bool hit = false;      // the plan came from the cache: nothing was solved
  bool stored = false;   // the plan was solved and written to the cache
  std::string path;
  std::string note;      // a cached file that was ignored, or a failed write (planning still succeeds)
};

// The karma plan for these inputs and settings: loaded from `dir` when a valid one is there (its fingerprint and
// shape checked), else planned with PlanKarma and stored. `dir` empty: no cache. `report` is filled only
// when planning ran.
Result<policy::Plan> PlanKarmaCached(const policy::SimInput& in, const SolverOptions& options, const std::string& dir,
                                     CacheOutcome* cache, SolveReport* report = nullptr);

}  // namespace karma::solver
