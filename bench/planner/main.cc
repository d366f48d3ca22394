// bench_planner: every strategy on real model iterations at capacity = ideal peak / k, as tables and geometric
// means (simulated iteration times on a hardware profile); optionally written as markdown.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "policy/access.h"
#include "policy/checker.h"
#include "policy/cost_model.h"
#include "policy/hw_profile.h"
#include "policy/strategies.h"
#include "ground/common/units.h"
#include "ground/trace/analysis.h"
#include "ground/trace/load.h"
#include "solver/planner.h"

namespace {

using namespace karma;

struct Row {
  std::string workload;
  double k = 0;
  uint64_t capacity = 0;
  double ideal_s = 0;
  std::map<std::string, policy::Evaluation> by_strategy;
};

double Ms(double s) { return s * 1e3; }

std::string Cell(const policy::Evaluation& e, double ideal_s) {
  if (!e.feasible) return "—";
  return fmt::format("{:.2f}", e.sim.iteration_s / ideal_s);
}

double GeoMean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_planner: simulated iteration time of every out-of-core strategy on real model iterations, at "
               "capacity = ideal in-core peak / k"};
  std::vector<std::string> files;
  std::string gpu = "v100-16g-pcie3", markdown;
  std::vector<double> ks = {1.5, 2, 3, 4, 6};
  std::string k_list, heading;
  bool append = false;
  app.add_option("FILES", files, "karma-graph or .ktrace files (default: the shared workloads)");
  app.add_option("--gpu", gpu, "hardware profile")->capture_default_str();
  app.add_option("--k", k_list, "pressure factors, comma-separated (default 1.5,2,3,4,6)");
  app.add_option("--markdown", markdown, "also write the tables as markdown to this file");
  app.add_flag("--append", append, "append to the markdown file (a further set of workloads) instead of replacing it");
  app.add_option("--heading", heading, "markdown section heading for this set of workloads");
  std::string solver_kind = "ilp";
  app.add_option("--solver", solver_kind,
                 "how karma plans: heuristic (Planner I) or ilp (Planner II: the faster of the heuristic and the GLPK plans)")
      ->check(CLI::IsMember({"heuristic", "ilp"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  solver::SolverOptions solver_options;
  solver_options.progress = nullptr;
  solver::ParseSolverKind(solver_kind, &solver_options.kind);
  if (!k_list.empty()) {
    ks.clear();
    for (const std::string& part : CLI::detail::split(k_list, ',')) {
      char* end = nullptr;
      const double k = std::strtod(part.c_str(), &end);
      if (end == part.c_str() || *end != '\0' || !(k > 0)) {
        fmt::print(stderr, "bench_planner: --k: '{}' is not a positive number\n", part);
        return 2;
      }
      ks.push_back(k);
    }
  }
  if (files.empty()) {
    for (const char* w : {"resnet50-b128.json", "vgg16-b64.json", "gpt2small-b8-s1024.json"}) {
      files.push_back(std::string(KARMA_SOURCE_DIR) + "/tests/data/workloads/" + w);
    }
  }
  auto hw = policy::FindProfile(gpu);
  if (!hw.ok()) {
    fmt::print(stderr, "bench_planner: {}\n", hw.status().message());
    return 2;
  }
  std::vector<std::string> names;
  for (const policy::StrategyInfo& s : policy::AllStrategies()) names.push_back(s.name);

  std::vector<Row> rows;
  std::string md = append ? fmt::format("\n# {}\n", heading.empty() ? "More workloads" : heading) : fmt::format(
      "# Planner results\n\nSimulated iteration time of every strategy, as a multiple of the in-core time (every op "
      "back to back, no capacity limit), on `{}`, at capacity = ideal in-core peak / k. — = infeasible (the reason is "
      "in `karma-trace compare`). Every feasible plan was replayed by the independent schedule checker.\n\n"
      "Regenerate: `bench/planner/results.sh` (runs `build/bin/bench_planner`).\n{}",
      gpu, heading.empty() ? "" : "\n# " + heading + "\n");
  for (const std::string& path : files) {
    auto loaded = trace::LoadIteration(path);
    if (!loaded.ok()) {
      fmt::print(stderr, "bench_planner: {}\n", loaded.status().message());
      return 1;
    }
    const trace::Iteration& it = *loaded;
    const uint64_t peak = trace::IdealMemory(it, trace::ComputeLifetimes(it)).peak_bytes;
    const policy::LargestOp largest = policy::FindLargestOp(it, policy::BuildAccessModel(it));
    const std::string label = std::filesystem::path(path).stem().string();
    fmt::print("\n{} ({} ops, in-core peak {}, ", label, it.ops.size(), FormatBytes(peak));
    std::string table = fmt::format(
        "\n## {}\n\n{} ({}), {} ops, in-core peak {}, largest op {} ({}: below that capacity only the strategies "
        "over managed memory, um, capacity and karma, can run it, paged)",
        label, it.model, it.source, it.ops.size(), FormatBytes(peak), FormatBytes(largest.bytes),
        it.ops[largest.op].name);
    bool header = false;
    for (double k : ks) {
      Row r;
      r.workload = label;
      r.k = k;
      r.capacity = static_cast<uint64_t>(static_cast<double>(peak) / k);
      policy::SimInput in = policy::MakeSimInput(it, *hw, r.capacity);
      r.ideal_s = policy::IdealSeconds(in.op_seconds);
      if (!header) {
        fmt::print("in-core {:.1f} ms)\n", Ms(r.ideal_s));
        fmt::print("{:>5} {:>10}", "k", "capacity");
        for (const std::string& n : names) fmt::print(" {:>12}", n);
        fmt::print(" {:>10}\n", "karma ms");
        table += fmt::format(", in-core {:.1f} ms.\n\n| k | capacity |", Ms(r.ideal_s));
        for (const std::string& n : names) table += " " + n + " |";
        table += " karma ms |\n|---|---|";
        for (size_t i = 0; i <= names.size(); ++i) table += "---|";
        table += "\n";
        header = true;
      }
      for (const std::string& n : names) {
        policy::Evaluation e = solver::Evaluate(n, in, {.record_events = true}, solver_options);
        if (e.feasible && !e.plan.strategy.empty()) {
          if (Status st = policy::CheckSchedule(in, e.plan, e.sim); !st.ok()) {
            fmt::print(stderr, "bench_planner: {} at k={}: {}: {}\n", label, k, n, st.message());
            return 1;
          }
        }
        e.sim.events.clear();
        r.by_strategy[n] = std::move(e);
      }
      const policy::Evaluation& karma = r.by_strategy["karma"];
      fmt::print("{:>5.1f} {:>10}", k, FormatBytes(r.capacity));
      table += fmt::format("| {} | {} |", k, FormatBytes(r.capacity));
      for (const std::string& n : names) {
        fmt::print(" {:>12}", Cell(r.by_strategy[n], r.ideal_s));
        table += " " + Cell(r.by_strategy[n], r.ideal_s) + " |";
      }
      const std::string karma_ms = karma.feasible ? fmt::format("{:.1f}", Ms(karma.sim.iteration_s)) : "—";
      fmt::print(" {:>10}\n", karma_ms);
      table += " " + karma_ms + " |\n";
      rows.push_back(std::move(r));
    }
    md += table;
  }

  // Geometric means over the configurations where karma is feasible.
  auto summary = [&](const std::vector<double>& select_ks) {
    std::vector<double> vs_incore, vs_best_old, vs_capacity, vs_checkpoint;
    int infeasible = 0;
    for (const Row& r : rows) {
      if (std::find(select_ks.begin(), select_ks.end(), r.k) == select_ks.end()) continue;
      const policy::Evaluation& karma = r.by_strategy.at("karma");
      if (!karma.feasible) {
        ++infeasible;
        continue;
      }
      const double t = karma.sim.iteration_s;
      vs_incore.push_back(t / r.ideal_s);
      double best_old = 0;
      for (const char* n : {"vdnn", "superneurons", "um"}) {
        const policy::Evaluation& e = r.by_strategy.at(n);
        if (e.feasible && (best_old == 0 || e.sim.iteration_s < best_old)) best_old = e.sim.iteration_s;
      }
      if (best_old > 0) vs_best_old.push_back(best_old / t);
      if (r.by_strategy.at("capacity").feasible) vs_capacity.push_back(r.by_strategy.at("capacity").sim.iteration_s / t);
      if (r.by_strategy.at("checkpoint").feasible) {
        vs_checkpoint.push_back(r.by_strategy.at("checkpoint").sim.iteration_s / t);
      }
    }
    std::string ksel;
    for (double k : select_ks) ksel += (ksel.empty() ? "" : ", ") + fmt::format("{}", k);
    std::string s = fmt::format(
        "| k = {} | {} | {:.2f} | {:.2f} ({}) | {:.2f} ({}) | {:.2f} ({}) |\n", ksel,
        vs_incore.size(), GeoMean(vs_incore), GeoMean(vs_best_old), vs_best_old.size(), GeoMean(vs_capacity),
        vs_capacity.size(), GeoMean(vs_checkpoint), vs_checkpoint.size());
    fmt::print("k = {}: karma feasible in {} ({} not): {:.2f}x in-core; {:.2f}x faster than the best of vdnn, "
               "superneurons, um ({} configs); {:.2f}x faster than capacity ({}); {:.2f}x faster than checkpoint ({})\n",
               ksel, vs_incore.size(), infeasible, GeoMean(vs_incore), GeoMean(vs_best_old), vs_best_old.size(),
               GeoMean(vs_capacity), vs_capacity.size(), GeoMean(vs_checkpoint), vs_checkpoint.size());
    return s;
  };
  fmt::print("\ngeometric means over the configurations where karma is feasible:\n");
  md += "\n## Geometric means\n\nOver the configurations where karma is feasible; in parentheses, how many of them the "
        "compared strategy is feasible in (the ratio is taken over those).\n\n"
        "| configurations | karma feasible | karma × in-core | speed-up over best of vdnn, superneurons, um | "
        "over capacity | over checkpoint |\n|---|---|---|---|---|---|\n";
  md += summary({2});
  md += summary({2, 3, 4});
  md += summary(ks);
  if (!markdown.empty()) {
    std::ofstream out(markdown, append ? std::ios::app : std::ios::trunc);
    out << md;
    if (!out) {
      fmt::print(stderr, "bench_planner: cannot write {}\n", markdown);
      return 1;
    }
    fmt::print("wrote {}\n", markdown);
  }
  return 0;
}
