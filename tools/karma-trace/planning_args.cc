// Resolving a planning command's file, profile and capacity (bytes, a fraction, or a pressure factor).
#include "tools/karma-trace/planning_args.h"

#include <fmt/format.h>

#include "policy/hw_profile.h"
#include "ground/common/units.h"
#include "ground/trace/analysis.h"
#include "tools/karma-trace/commands.h"

namespace karma::tools {

void AddPlanningOptions(CLI::App* sub, PlanningArgs* args) {
  sub->add_option("FILE", args->file, "a .ktrace or karma-graph JSON file")->required();
  sub->add_option("--gpu", args->gpu, "hardware profile: " + policy::ProfileNames())->capture_default_str();
  sub->add_option("--link", args->link,
                  "host link rates in GB/s instead of the profile's: 6/4 (to the device/to the host) or 6 for both, "
                  "e.g. as libkarma.so measured them ('the plan's moves ran at ...', KARMA_LOG=info)");
  CLI::Option* capacity = sub->add_option("--capacity", args->capacity,
                  "device bytes for tensors: plain bytes (5705000000), a unit (5.3GiB), or a fraction of the "
                  "profile's memory (0.5); default: the profile's memory");
  sub->add_option("--pressure", args->pressure,
                  "memory pressure K instead of --capacity: capacity = ideal in-core peak / K (K = 2: the "
                  "iteration needs twice the memory)")
      ->check(CLI::PositiveNumber)
      ->excludes(capacity);
  sub->add_option("--solver", args->solver,
                  "how karma plans: heuristic (Planner I's search) or ilp (problems 1 and 2 as GLPK integer "
                  "programs, warm-started from the heuristic plan, which it replaces only when faster in simulation)")
      ->check(CLI::IsMember({"heuristic", "ilp"}))
      ->capture_default_str();
  sub->add_option("--solver-time-limit", args->solver_time_limit_s,
                  "seconds of wall clock for one karma plan with --solver ilp (the heuristic first, then the ILP "
                  "search with the time left); what the ILP search has not found by then, the heuristic plan stands in "
                  "for")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--plan-cache", args->plan_cache,
                  "directory of the plan cache, or 'off' (default: KARMA_PLAN_CACHE, else "
                  "$XDG_CACHE_HOME/karma/plans): a karma plan for the same trace, GPU, capacity and solver settings "
                  "is loaded instead of solved");
}

policy::Evaluation EvaluateStrategy(const PlanningArgs& args, const policy::SimInput& in, std::string_view strategy,
                                    const policy::SimOptions& sim, KarmaPlanning* karma) {
  if (strategy != "karma") return policy::Evaluate(strategy, in, sim);
  solver::SolverOptions options;
  solver::ParseSolverKind(args.solver, &options.kind);
  options.time_limit_s = args.solver_time_limit_s;
  const std::string dir = args.plan_cache.empty() ? solver::DefaultPlanCacheDir()
                          : args.plan_cache == "off" ? std::string()
                                                     : args.plan_cache;
  KarmaPlanning local;
  KarmaPlanning& k = karma != nullptr ? *karma : local;
  k.ran = true;
  return solver::EvaluateKarmaPlan(in, solver::PlanKarmaCached(in, options, dir, &k.cache, &k.report), sim);
}

void PrintKarmaPlanning(const KarmaPlanning& k) {
  if (!k.ran) return;
  if (k.cache.hit) {
    fmt::print("plan cache  hit: loaded {} (nothing solved)\n", k.cache.path);
  } else {
    fmt::print("solver      {}\n", k.report.Summary());
    if (k.cache.stored) fmt::print("plan cache  stored {}\n", k.cache.path);
    else if (!k.cache.enabled) fmt::print("plan cache  off\n");
  }
  if (!k.cache.note.empty()) fmt::print("plan cache  {}\n", k.cache.note);
}

nlohmann::json KarmaPlanningJson(const KarmaPlanning& k) {
  nlohmann::json j;
  j["plan_cache"] = {{"enabled", k.cache.enabled}, {"hit", k.cache.hit}, {"stored", k.cache.stored},
                     {"path", k.cache.path}, {"note", k.cache.note}};
  if (k.cache.hit) return j;
  const solver::SolveReport& r = k.report;
  j["solver"] = {{"kind", solver::Name(r.kind)}, {"solves", r.solves}, {"optimal", r.optimal},
                 {"stopped_early", r.feasible}, {"failed", r.failed}, {"warm_starts", r.warm_starts},
                 {"glpk_s", r.glpk_s}, {"planning_s", r.planning_s},
                 {"heuristic_ms", r.heuristic_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.heuristic_s * 1e3)},
                 {"ilp_ms", r.ilp_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.ilp_s * 1e3)},
                 {"neighbours", r.neighbours},
                 {"polished_ms", r.polished_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.polished_s * 1e3)},
                 {"polished_taken", r.polished_taken},
                 {"winner", r.winner}, {"fallback", r.fallback}, {"failures", r.failures}};
  return j;
}

std::unique_ptr<PlanningInput> ResolvePlanningInput(const PlanningArgs& args) {
  auto hw = policy::FindProfile(args.gpu);
  if (!hw.ok()) {
    Fail(hw.status().WithContext("--gpu"));
    return nullptr;
  }
  if (!args.link.empty()) {
    auto rates = policy::ParseLinkRates(args.link);
    if (!rates.ok()) {
      Fail(rates.status().WithContext("--link"));
      return nullptr;
    }
    *hw = policy::WithLink(*hw, rates->first, rates->second);
  }
  auto p = std::make_unique<PlanningInput>();
  if (!LoadOrReport(args.file, &p->it)) return nullptr;
  p->ideal_peak = trace::IdealMemory(p->it, trace::ComputeLifetimes(p->it)).peak_bytes;
  uint64_t capacity = hw->memory_bytes;
  if (!args.capacity.empty()) {
    auto c = ParseCapacity(args.capacity);
    if (!c.ok()) {
      Fail(c.status().WithContext("--capacity"));
      return nullptr;
    }
    capacity = c->Resolve(hw->memory_bytes, hw->memory_bytes);
  } else if (args.pressure > 0) {
    capacity = static_cast<uint64_t>(static_cast<double>(p->ideal_peak) / args.pressure);
  }
  p->in = policy::MakeSimInput(p->it, *hw, capacity);
  return p;
}

}  // namespace karma::tools
