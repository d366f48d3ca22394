// `karma-trace simulate` and `compare`: plan with a strategy (or load a plan), simulate it, and tabulate.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "policy/checker.h"
#include "policy/cost_model.h"
#include "policy/plan_io.h"
#include "policy/strategies.h"
#include "ground/common/units.h"
#include "tools/karma-trace/commands.h"
#include "tools/karma-trace/data_parallel_args.h"
#include "tools/karma-trace/planning_args.h"
#include "tools/karma-trace/table.h"

namespace karma::tools {
namespace {

struct SimulateArgs {
  PlanningArgs planning;
  DataParallelArgs data_parallel;
  std::string strategy;
  std::string plan_file;
  std::string save_plan;
  bool json = false;
};

double Ms(double s) { return s * 1e3; }

// Eq. 1 of the paper over time: the share of each twentieth of the iteration the compute engine is busy.
constexpr int kOccupancySlices = 20;

nlohmann::json ResultJson(const policy::Evaluation& e, const policy::SimInput& in, double ideal_s) {
  nlohmann::json j;
  j["strategy"] = e.strategy;
  j["profile"] = policy::ProfileLabel(in.hw);
  j["capacity_bytes"] = in.capacity;
  j["feasible"] = e.feasible;
  j["ideal_ms"] = Ms(ideal_s);
  if (!e.feasible) {
    j["reason"] = e.reason;
    return j;
  }
  const policy::SimResult& s = e.sim;
  j["iteration_ms"] = Ms(s.iteration_s);
  j["x_incore"] = ideal_s > 0 ? s.iteration_s / ideal_s : 1.0;
  j["compute_ms"] = Ms(s.compute_s);
  j["recompute_ms"] = Ms(s.recompute_s);
  j["stall_ms"] = Ms(s.stall_s);
  j["occupancy"] = s.Occupancy();
  if (!s.events.empty()) j["occupancy_over_time"] = policy::OccupancyOverTime(s, kOccupancySlices);
  j["swap_in_bytes"] = s.swap_in_bytes;
  j["swap_out_bytes"] = s.swap_out_bytes;
  j["peak_bytes"] = s.peak_bytes;
  j["h2d_busy_ms"] = Ms(s.h2d_busy_s);
  j["d2h_busy_ms"] = Ms(s.d2h_busy_s);
  j["paged_ops"] = s.paged_ops;
  j["paging_ms"] = Ms(s.paging_s);
  j["paged_in_bytes"] = s.paged_in_bytes;
  j["paged_out_bytes"] = s.paged_out_bytes;
  if (!e.plan.strategy.empty()) {
    const policy::PlanCounts c = policy::CountActions(e.plan, *in.it);
    j["actions"] = {{"swap_out", c.swap_outs}, {"swap_in", c.swap_ins}, {"discard", c.discards},
                    {"recompute", c.recomputes}, {"recomputed_ops", c.recomputed_ops}};
    j["blocks"] = e.plan.blocks.size();
    j["note"] = e.plan.note;
  }
  return j;
}

// Simulates a plan file instead of planning.
policy::Evaluation EvaluatePlanFile(const std::string& path, const policy::SimInput& in, bool* ok) {
  policy::Evaluation e;
  *ok = false;
  auto plan = policy::ReadPlanFile(path);
  if (!plan.ok()) {
    Fail(plan.status());
    return e;
  }
  *ok = true;
  e.plan = std::move(plan).value();
  const std::string expected = policy::Fingerprint(*in.it, policy::ProfileLabel(in.hw), in.capacity);
  if (!e.plan.fingerprint.empty() && e.plan.fingerprint != expected) {
    std::fprintf(stderr, "%s: warning: %s was made for other inputs (fingerprint %s, these give %s)\n",
                 ProgramName().c_str(), path.c_str(), e.plan.fingerprint.c_str(), expected.c_str());
  }
  e.strategy = e.plan.strategy.empty() ? "plan" : e.plan.strategy;
  e.sim = policy::Simulate(in, e.plan, {.record_events = true});
  e.feasible = e.sim.feasible;
  e.reason = e.sim.reason;
  return e;
}

int RunSimulate(const SimulateArgs& a) {
  if (a.strategy.empty() == a.plan_file.empty()) {
    std::fprintf(stderr, "%s: error: give --strategy NAME or --plan FILE (one of them)\n", ProgramName().c_str());
    return kExitUsage;
  }
  bool bad = false;
  const std::optional<policy::DataParallelOptions> dp = ResolveDataParallel(a.data_parallel, &bad);
  if (bad) return kExitUsage;
  auto p = ResolvePlanningInput(a.planning);
  if (!p) return kExitFailure;
  const policy::SimInput& in = p->in;
  const double ideal_s = policy::IdealSeconds(in.op_seconds);
  policy::Evaluation e;
  KarmaPlanning karma;
  if (!a.plan_file.empty()) {
    bool ok = false;
    e = EvaluatePlanFile(a.plan_file, in, &ok);
    if (!ok) return kExitFailure;
  } else {
    e = EvaluateStrategy(a.planning, in, a.strategy, {.record_events = true}, &karma);
  }
  if (e.feasible && !e.plan.strategy.empty()) {
    // Every plan the simulator accepts is replayed by the independent checker before it is reported.
    if (Status st = policy::CheckSchedule(in, e.plan, e.sim); !st.ok()) return Fail(st);
  }
  if (!a.save_plan.empty() && !e.plan.strategy.empty()) {
    if (Status st = policy::WritePlanFile(a.save_plan, e.plan); !st.ok()) return Fail(st);
  }
  std::optional<policy::DataParallelResult> pipeline;
  if (dp && e.feasible) pipeline = policy::SimulateDataParallel(in, e.plan, e.sim, *dp);
  if (a.json) {
    nlohmann::json j = ResultJson(e, in, ideal_s);
    if (karma.ran) j.update(KarmaPlanningJson(karma));
    if (pipeline) AddDataParallelJson(*dp, *pipeline, &j);
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  fmt::print("{} on {}, capacity {} (in-core peak {})\n", e.strategy, policy::ProfileLabel(in.hw), FormatBytes(in.capacity),
             FormatBytes(p->ideal_peak));
  if (!e.feasible) {
    fmt::print("infeasible: {}\n", e.reason);
    PrintKarmaPlanning(karma);
    return kExitOk;
  }
  const policy::SimResult& s = e.sim;
  fmt::print("iteration   {:.1f} ms  ({:.2f}x in-core {:.1f} ms)\n", Ms(s.iteration_s), s.iteration_s / ideal_s,
             Ms(ideal_s));
  fmt::print("compute     {:.1f} ms, recompute {:.1f} ms, stall {:.1f} ms, occupancy {:.1f}%\n", Ms(s.compute_s),
             Ms(s.recompute_s), Ms(s.stall_s), 100 * s.Occupancy());
  std::string slices;
  for (double o : policy::OccupancyOverTime(s, kOccupancySlices)) slices += fmt::format(" {:.0f}", 100 * o);
  fmt::print("occupancy   over time, % per twentieth of the iteration:{}\n", slices);
  fmt::print("transfers   in {} ({:.1f} ms), out {} ({:.1f} ms)\n", FormatBytes(s.swap_in_bytes), Ms(s.h2d_busy_s),
             FormatBytes(s.swap_out_bytes), Ms(s.d2h_busy_s));
  if (s.paged_ops > 0) {
    fmt::print("paging      {} ops larger than the capacity ran paged: {:.1f} ms, {} faulted in, {} evicted\n",
               s.paged_ops, Ms(s.paging_s), FormatBytes(s.paged_in_bytes), FormatBytes(s.paged_out_bytes));
  }
  fmt::print("peak        {}\n", FormatBytes(s.peak_bytes));
  if (!e.plan.strategy.empty()) {
    const policy::PlanCounts c = policy::CountActions(e.plan, *in.it);
    fmt::print("plan        {} swap-outs, {} swap-ins, {} discards, {} recomputes ({} ops), {} blocks\n", c.swap_outs,
               c.swap_ins, c.discards, c.recomputes, c.recomputed_ops, e.plan.blocks.size());
    if (!e.plan.note.empty()) fmt::print("            {}\n", e.plan.note);
  }
  if (pipeline) PrintDataParallel(*dp, *pipeline);
  PrintKarmaPlanning(karma);
  if (!a.save_plan.empty()) fmt::print("wrote {}\n", a.save_plan);
  return kExitOk;
}

struct CompareArgs {
  PlanningArgs planning;
  bool json = false;
};

int RunCompare(const CompareArgs& a) {
  auto p = ResolvePlanningInput(a.planning);
  if (!p) return kExitFailure;
  const policy::SimInput& in = p->in;
  const double ideal_s = policy::IdealSeconds(in.op_seconds);
  nlohmann::json rows = nlohmann::json::array();
  TextTable t;
  for (const char* col : {"strategy", "feasible", "ms", "x in-core", "stall %", "swapped GiB", "recompute ms",
                          "peak GiB"}) {
    t.AddColumn(col, std::string(col) == "strategy" || std::string(col) == "feasible" ? TextTable::kLeft
                                                                                        : TextTable::kRight);
  }
  t.AddColumn("note", TextTable::kLeft);
  KarmaPlanning karma;
  for (const policy::StrategyInfo& info : policy::AllStrategies()) {
    policy::Evaluation e = EvaluateStrategy(a.planning, in, info.name, {.record_events = true}, &karma);
    if (e.feasible && !e.plan.strategy.empty()) {
      if (Status st = policy::CheckSchedule(in, e.plan, e.sim); !st.ok()) return Fail(st);
    }
    rows.push_back(ResultJson(e, in, ideal_s));
    if (!e.feasible) {
      t.AddRow({info.name, "no", "-", "-", "-", "-", "-", "-", e.reason});
      continue;
    }
    const policy::SimResult& s = e.sim;
    t.AddRow({info.name, "yes", fmt::format("{:.1f}", Ms(s.iteration_s)), fmt::format("{:.2f}", s.iteration_s / ideal_s),
              fmt::format("{:.1f}", 100 * s.stall_s / s.iteration_s),
              fmt::format("{:.2f}", ToGiB(s.swap_in_bytes + s.swap_out_bytes)), fmt::format("{:.1f}", Ms(s.recompute_s)),
              fmt::format("{:.2f}", ToGiB(s.peak_bytes)), e.plan.note});
  }
  if (a.json) {
    nlohmann::json j{{"profile", policy::ProfileLabel(in.hw)}, {"capacity_bytes", in.capacity}, {"ideal_ms", Ms(ideal_s)},
                     {"ideal_peak_bytes", p->ideal_peak}, {"strategies", rows}};
    j.update(KarmaPlanningJson(karma));
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  fmt::print("{} on {}: capacity {} = in-core peak {} / {:.2f}; in-core {:.1f} ms\n\n",
             p->it.model.empty() ? a.planning.file : p->it.model, policy::ProfileLabel(in.hw), FormatBytes(in.capacity),
             FormatBytes(p->ideal_peak), static_cast<double>(p->ideal_peak) / static_cast<double>(in.capacity),
             Ms(ideal_s));
  t.Print();
  fmt::print("\n");
  PrintKarmaPlanning(karma);
  return kExitOk;
}

}  // namespace

void RegisterSimulate(CLI::App& app, Action* selected) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* sub = AddCommand(app, "simulate",
                             "Plan one iteration with a strategy (or load a plan) for a GPU and a capacity, simulate "
                             "it (compute, host-to-device and device-to-host engines), and check the schedule.",
                             selected, [args] { return RunSimulate(*args); });
  AddPlanningOptions(sub, &args->planning);
  AddDataParallelOptions(sub, &args->data_parallel);
  std::vector<std::string> names;
  for (const policy::StrategyInfo& i : policy::AllStrategies()) names.push_back(i.name);
  sub->add_option("--strategy", args->strategy, "one of: " + policy::StrategyNames())->check(CLI::IsMember(names));
  sub->add_option("--plan", args->plan_file, "simulate this plan file (karma-plan JSON) instead of planning");
  sub->add_option("--save-plan", args->save_plan, "write the plan as karma-plan JSON to this file");
  sub->add_flag("--json", args->json,
                "print one JSON object: strategy, feasible, iteration_ms, ideal_ms, stall_ms, swap_in_bytes, "
                "swap_out_bytes, recompute_ms, peak_bytes, ... (reason when infeasible)");

  auto cargs = std::make_shared<CompareArgs>();
  CLI::App* cmp = AddCommand(app, "compare",
                             "Every strategy on one iteration, GPU and capacity: feasible, iteration time, times "
                             "in-core, stall share, bytes swapped, recompute time, peak.",
                             selected, [cargs] { return RunCompare(*cargs); });
  AddPlanningOptions(cmp, &cargs->planning);
  cmp->add_flag("--json", cargs->json, "print the rows as JSON");
}

}  // namespace karma::tools
