// KARMA's plan with problems 1 and 2 solved by GLPK, warm-started from the heuristic plan and falling back to it.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/plan.h"
#include "policy/simulator.h"
#include "policy/strategies.h"
#include "solver/mip.h"

namespace karma::solver {

enum class SolverKind : uint8_t {
  kHeuristic = 0,  // Planner I's search (policy::PlanKarma)
  kIlp = 1,        // problems 1 and 2 as integer programs; the better of their plans and the heuristic plan
};
const char* Name(SolverKind k);
bool ParseSolverKind(std::string_view s, SolverKind* out);

struct SolverOptions {
  SolverKind kind = SolverKind::kIlp;
  double time_limit_s = 6;   // wall clock for the whole plan; the ILP search has what the heuristic leaves
  double mip_gap = 1e-2;     // relative gap at which a solve stops
  size_t max_layers = 48;    // candidate layers of problem 1, before the warm start's block starts are added
  int lp_iteration_limit = 0;  // simplex iterations per root LP relaxation; 0: unlimited
  bool warm_start = true;    // offer GLPK the heuristic's blocking and recompute choice as first incumbents
  std::function<void(const MipProgress&)> progress = PrintProgress;
  const std::atomic<bool>* cancel = nullptr;  // once true, no further solve starts and a running one stops
};

// What a plan with the solver did.
struct SolveReport {
  SolverKind kind = SolverKind::kIlp;
  int solves = 0, optimal = 0, feasible = 0, failed = 0;  // GLPK solves of problems 1 and 2, by outcome
  int warm_starts = 0;        // incumbents GLPK accepted from the heuristic
  double glpk_s = 0;          // wall time inside GLPK
  double planning_s = 0;      // wall time of the whole plan (heuristic, models, builds, simulations)
  double heuristic_s = -1;    // simulated iteration of the heuristic plan; -1: it has none
  double ilp_s = -1;          // of the fastest plan built from GLPK's solutions (or a neighbour of it); -1: none
  int neighbours = 0;         // plans the local search around the best ILP plan built and simulated
  double polished_s = -1;     // the fastest of them; -1: none
  bool polished_taken = false;  // it was clearly faster and replaced the grid's best (ilp_s is then it)
  std::string winner;         // "ilp" or "heuristic"
  std::string fallback;       // why the heuristic plan stands in when GLPK gave no usable solution
  std::vector<std::string> failures;  // each failed solve, with GLPK's reason
  std::string Summary() const;         // one line for the CLI
};

// With kHeuristic, policy::PlanKarma. With kIlp, for every layer-granularity option and block count of
// Planner I's grid: problem 1 over candidate layers, then problem 2 over its blocks, each solution built into a
// plan (policy::BuildKarmaPlan) and simulated. The heuristic plan is the warm start: an ILP plan replaces it only
// when it simulates faster, so the result is never slower than the heuristic's; when GLPK gives no integer
// solution (infeasible, time limit, error) the heuristic plan is the fallback and the reasons are logged.
Result<policy::Plan> PlanKarma(const policy::SimInput& in, const SolverOptions& options,
                               SolveReport* report = nullptr);

// A karma plan (or why there is none) simulated, with its fingerprint set: what policy::Evaluate gives for karma.
policy::Evaluation EvaluateKarmaPlan(const policy::SimInput& in, Result<policy::Plan> plan,
                                     const policy::SimOptions& sim);

// policy::Evaluate, with karma planned by PlanKarma above.
policy::Evaluation Evaluate(std::string_view strategy, const policy::SimInput& in, const policy::SimOptions& sim,
                            const SolverOptions& options, SolveReport* report = nullptr);

}  // namespace karma::solver
