// bench_solver: Planner II against Planner I — planning wall time and simulated iteration time of the karma plan
// from --solver heuristic and --solver ilp, on the shared workloads and on synthetic linear chains, plus the wall
// time of the whole `karma-trace simulate --strategy karma --solver ilp` command.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "policy/checker.h"
#include "policy/cost_model.h"
#include "policy/hw_profile.h"
#include "policy/strategies.h"
#include "ground/common/units.h"
#include "ground/trace/analysis.h"
#include "ground/trace/ktrace_io.h"
#include "ground/trace/load.h"
#include "solver/planner.h"
#include "tests/common/linear_chain.h"

namespace {

using namespace karma;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double Ms(double s) { return s * 1e3; }

struct Workload {
  std::string label;
  std::string path;  // a file karma-trace can load
  trace::Iteration it;
};

// Wall seconds of one shell command (its output discarded); < 0 when it failed.
double TimeCommand(const std::string& command) {
  const Clock::time_point t = Clock::now();
  const int rc = std::system((command + " >/dev/null 2>&1").c_str());
  return rc == 0 ? Since(t) : -1;
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_solver: karma plans from the heuristic (Planner I) and from the ILP planner (Planner II, GLPK): "
               "planning wall time and simulated iteration time, at capacity = ideal in-core peak / k"};
  std::string gpu = "v100-16g-pcie3", markdown, karma_trace;
  std::vector<double> ks = {2, 3, 4};
  std::vector<size_t> chains = {1000, 10000};
  double time_limit = solver::SolverOptions{}.time_limit_s;
  app.add_option("--gpu", gpu, "hardware profile")->capture_default_str();
  app.add_option("--k", ks, "pressure factors")->delimiter(',')->capture_default_str();
  app.add_option("--chains", chains, "synthetic linear chains, by op count")->delimiter(',')->capture_default_str();
  app.add_option("--time-limit", time_limit, "the ILP planner's wall-clock limit per plan (s)")->capture_default_str();
  app.add_option("--karma-trace", karma_trace,
                 "karma-trace binary: also time `karma-trace simulate --strategy karma --solver ilp` per row");
  app.add_option("--markdown", markdown, "also write the table as markdown to this file");
  CLI11_PARSE(app, argc, argv);
  auto hw = policy::FindProfile(gpu);
  if (!hw.ok()) {
    fmt::print(stderr, "bench_solver: {}\n", hw.status().message());
    return 2;
  }

  std::vector<Workload> workloads;
  for (const char* w : {"resnet50-b128", "vgg16-b64", "gpt2small-b8-s1024"}) {
    Workload wl{w, std::string(KARMA_SOURCE_DIR) + "/tests/data/workloads/" + w + ".json", {}};
    auto loaded = trace::LoadIteration(wl.path);
    if (!loaded.ok()) {
      fmt::print(stderr, "bench_solver: {}\n", loaded.status().message());
      return 1;
    }
    wl.it = std::move(loaded).value();
    workloads.push_back(std::move(wl));
  }
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() / fmt::format("bench_solver_{}", getpid());
  std::filesystem::create_directories(tmp);
  for (size_t ops : chains) {
    Workload wl{fmt::format("linear-chain-{}", ops), (tmp / fmt::format("chain{}.ktrace", ops)).string(),
                testing::LinearChain(ops)};
    if (Status st = trace::WriteKtraceFile(wl.it, wl.path); !st.ok()) {
      fmt::print(stderr, "bench_solver: {}\n", st.message());
      return 1;
    }
    workloads.push_back(std::move(wl));
  }

  std::string md = fmt::format(
      "# Planner II results\n\n"
      "The karma plan from Planner I's search (`--solver heuristic`) and from the ILP planner (`--solver ilp`: the "
      "heuristic plan, then problems 1 and 2 solved with GLPK over Planner I's grid of block counts and "
      "layer-granularity options, each solution built into a plan and simulated, then a local search around the "
      "best one with the time left, taken when 5% faster; the faster plan is used) on `{}`, "
      "at capacity = ideal in-core peak / k, ILP time limit {} s per plan (the heuristic included). Times in ms are "
      "simulated iterations; *plan s* columns are wall-clock planning seconds on the machine that ran the bench "
      "(2 cores, shared with other builds: wall times vary by tens of percent). *GLPK solves*: how many integer "
      "programs were solved (optimal within the 1 % gap; stopped by the time limit with an incumbent; without a "
      "usable solution, e.g. a time slice that ended before the LP relaxation or a model the coarse memory view "
      "makes infeasible). *plan used*: which plan won in simulation (the ILP plan replaces the heuristic only "
      "when faster). {}Every ILP planner plan was replayed by the independent schedule checker.\n\n"
      "Linear chains: `tests/common/linear_chain.h` (fully connected + ReLU layers of random widths, batch 2048, "
      "SGD with momentum). Regenerate: `bench/solver/results.sh` (runs `build/bin/bench_solver --karma-trace "
      "build/bin/karma-trace --markdown docs/solver-results.md`).\n\n",
      gpu, time_limit,
      karma_trace.empty() ? ""
                          : "*`simulate --solver ilp` s*: wall time of the whole command `karma-trace simulate FILE "
                            "--pressure K --strategy karma --solver ilp --plan-cache off` (load, plan, simulate, "
                            "check, print). ");
  md += fmt::format(
      "| workload | ops | k | capacity | heuristic plan s | heuristic ms | ILP plan s | ILP ms | ILP / heuristic | "
      "GLPK solves (optimal, stopped, failed) | GLPK s | plan used |{}\n|---|---|---|---|---|---|---|---|---|---|---|---|{}\n",
      karma_trace.empty() ? "" : " `simulate --solver ilp` s |", karma_trace.empty() ? "" : "---|");
  fmt::print("{:<22} {:>6} {:>3} {:>10} {:>8} {:>10} {:>8} {:>10} {:>7} {:>14} {:>7} {:>9}{}\n", "workload", "ops", "k",
             "capacity", "heur s", "heur ms", "ilp s", "ilp ms", "ratio", "solves o/s/f", "glpk s", "used",
             karma_trace.empty() ? "" : "  cli s");
  int worse = 0, slow = 0;
  double worst_cli = 0;
  for (const Workload& w : workloads) {
    const uint64_t peak = trace::IdealMemory(w.it, trace::ComputeLifetimes(w.it)).peak_bytes;
    for (double k : ks) {
      const uint64_t capacity = static_cast<uint64_t>(static_cast<double>(peak) / k);
      const policy::SimInput in = policy::MakeSimInput(w.it, *hw, capacity);
      Clock::time_point t = Clock::now();
      const Result<policy::Plan> h = policy::PlanKarma(in);
      const double h_wall = Since(t);
      const policy::SimResult hs = h.ok() ? policy::Simulate(in, *h) : policy::SimResult{};
      solver::SolverOptions o;
      o.time_limit_s = time_limit;
      o.progress = nullptr;
      solver::SolveReport r;
      t = Clock::now();
      const Result<policy::Plan> ilp = solver::PlanKarma(in, o, &r);
      const double ilp_wall = Since(t);
      policy::SimResult is;
      if (ilp.ok()) {
        is = policy::Simulate(in, *ilp, {.record_events = true});
        if (is.feasible) {
          if (Status st = policy::CheckSchedule(in, *ilp, is); !st.ok()) {
            fmt::print(stderr, "bench_solver: {} at k={}: the checker refuses the ILP planner's plan: {}\n", w.label, k,
                       st.message());
            return 1;
          }
        }
      }
      const bool both = hs.feasible && is.feasible;
      if (both && is.iteration_s > hs.iteration_s * (1 + 1e-12)) ++worse;
      if (hs.feasible && !is.feasible) ++worse;
      double cli = 0;
      if (!karma_trace.empty()) {
        cli = TimeCommand(fmt::format("{} simulate {} --gpu {} --pressure {} --strategy karma --solver ilp "
                                      "--solver-time-limit {} --plan-cache off",
                                      Quote(karma_trace), Quote(w.path), gpu, k, time_limit));
        if (cli < 0 || cli > 10) ++slow;
        worst_cli = std::max(worst_cli, cli);
      }
      const std::string hms = hs.feasible ? fmt::format("{:.1f}", Ms(hs.iteration_s)) : "—";
      const std::string ims = is.feasible ? fmt::format("{:.1f}", Ms(is.iteration_s)) : "—";
      const std::string ratio = both ? fmt::format("{:.3f}", is.iteration_s / hs.iteration_s) : "—";
      const std::string solves = fmt::format("{} ({}, {}, {})", r.solves, r.optimal, r.feasible, r.failed);
      const std::string cli_cell = cli < 0 ? "failed" : fmt::format("{:.2f}", cli);
      fmt::print("{:<22} {:>6} {:>3} {:>10} {:>8.2f} {:>10} {:>8.2f} {:>10} {:>7} {:>14} {:>7.2f} {:>9}{}\n", w.label,
                 w.it.ops.size(), k, FormatBytes(capacity), h_wall, hms, ilp_wall, ims, ratio, solves, r.glpk_s,
                 r.winner, karma_trace.empty() ? "" : fmt::format("  {:>5}", cli_cell));
      std::fflush(stdout);
      md += fmt::format("| {} | {} | {} | {} | {:.2f} | {} | {:.2f} | {} | {} | {} | {:.2f} | {} |{}\n", w.label,
                        w.it.ops.size(), k, FormatBytes(capacity), h_wall, hms, ilp_wall, ims, ratio, solves,
                        r.glpk_s, r.winner, karma_trace.empty() ? "" : " " + cli_cell + " |");
    }
  }
  std::filesystem::remove_all(tmp);
  fmt::print("\nILP plan slower than the heuristic plan: {} rows", worse);
  if (!karma_trace.empty()) fmt::print("; `simulate --solver ilp` over 10 s or failed: {} rows (slowest {:.2f} s)", slow, worst_cli);
  fmt::print("\n");
  md += fmt::format("\nILP plan slower than the heuristic plan in {} of {} rows", worse, workloads.size() * ks.size());
  if (!karma_trace.empty()) md += fmt::format("; slowest `simulate --solver ilp`: {:.2f} s", worst_cli);
  md += ".\n";
  if (!markdown.empty()) {
    std::ofstream(markdown) << md;
    fmt::print("wrote {}\n", markdown);
  }
  return worse == 0 && slow == 0 ? 0 : 1;
}
