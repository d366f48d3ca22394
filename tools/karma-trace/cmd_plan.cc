// `karma-trace plan`: a strategy's plan as stages in the paper's notation, its blocks, and a timeline picture.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "policy/checker.h"
#include "policy/cost_model.h"
#include "policy/plan_io.h"
#include "policy/stages.h"
#include "policy/strategies.h"
#include "ground/common/units.h"
#include "ground/trace/ktrace_io.h"
#include "tools/karma-trace/commands.h"
#include "tools/karma-trace/data_parallel_args.h"
#include "tools/karma-trace/planning_args.h"
#include "tools/karma-trace/svg.h"
#include "tools/karma-trace/table.h"

namespace karma::tools {
namespace {

struct PlanArgs {
  PlanningArgs planning;
  DataParallelArgs data_parallel;
  std::string strategy = "karma";
  std::string svg;
  std::string save;
  size_t stages = 60;
  bool json = false;
};

double Ms(double s) { return s * 1e3; }

const char* StageColor(policy::Stage::Kind k) {
  switch (k) {
    case policy::Stage::kForward: return "#4f86c6";
    case policy::Stage::kBackward: return "#e8913a";
    case policy::Stage::kRecompute: return "#c0392b";
    case policy::Stage::kUpdate: return "#5aa55a";
  }
  return "#888";
}

// Distinct, calm colors for blocks on the copy lanes; grey for persistent data (no block).
const char* BlockColor(int block) {
  static constexpr const char* kPalette[] = {"#8c6bb1", "#41ab5d", "#df65b0", "#3690c0", "#fd8d3c",
                                             "#807dba", "#66c2a4", "#e7298a", "#2b8cbe", "#d94801"};
  return block < 0 ? "#9a9a9a" : kPalette[static_cast<size_t>(block) % std::size(kPalette)];
}

struct CopySpan {
  double start, end;
  int block;
  uint32_t buffer;
};

// The compute lane: each stage's span in a light tint, the compute engine's busy time in it solid; gaps are stalls.
template <typename ToX>
void ComputeLane(Svg& svg, const policy::SimResult& s, const std::vector<policy::Stage>& stages, ToX X,
                 double y_compute, double lane_h) {
  std::vector<std::pair<double, double>> busy;  // merged busy intervals
  double began = 0;
  for (const policy::SimEvent& ev : s.events) {
    if (ev.kind == policy::SimEvent::kComputeStart) began = ev.t;
    if (ev.kind != policy::SimEvent::kComputeEnd || ev.t <= began) continue;
    if (!busy.empty() && began - busy.back().second < 1e-9) busy.back().second = ev.t;
    else busy.emplace_back(began, ev.t);
  }
  for (const policy::Stage& st : stages) {
    const double x0 = X(st.start_s), x1 = X(st.end_s);
    svg.Rect(x0, y_compute, std::max(x1 - x0, 0.6), lane_h, StageColor(st.kind), 0.3);
    for (const auto& [b0, b1] : busy) {
      const double lo = std::max(b0, st.start_s), hi = std::min(b1, st.end_s);
      if (hi > lo) svg.Rect(X(lo), y_compute, std::max(X(hi) - X(lo), 0.4), lane_h, StageColor(st.kind), 0.95);
    }
    if (x1 - x0 > 22) svg.Text((x0 + x1) / 2, y_compute + lane_h / 2 + 4, st.Label(), 11, "middle", "white", "bold");
  }
  double idle_from = 0;
  for (const auto& [b0, b1] : busy) {
    if (b0 - idle_from > 1e-6) svg.Rect(X(idle_from), y_compute + lane_h - 5, X(b0) - X(idle_from), 5, "#555");
    idle_from = b1;
  }
}

// The copy lanes: each swap's span in its block's color, runs of one block's copies labelled (Siin, Siout, Pin).
template <typename ToX>
void CopyLanes(Svg& svg, const policy::SimInput& in, const policy::Evaluation& e, ToX X, double y_h2d, double y_d2h,
               double lane_h) {
  const policy::SimResult& s = e.sim;
  const std::vector<policy::Block> blocks = policy::DisplayBlocks(in, e.plan);
  const std::vector<int> owner = policy::BufferBlocks(in, blocks);
  std::map<uint32_t, double> starts;
  std::vector<CopySpan> ins, outs;
  for (const policy::SimEvent& ev : s.events) {
    if (ev.kind == policy::SimEvent::kCopyStart) starts[ev.index] = ev.t;
    if (ev.kind != policy::SimEvent::kCopyEnd) continue;
    const policy::Action& a = e.plan.actions[ev.index];
    const int blk = a.block >= 0 ? a.block : owner[a.buffer];
    (a.kind == policy::ActionKind::kSwapIn ? ins : outs).push_back({starts[ev.index], ev.t, blk, a.buffer});
  }
  for (const auto* list : {&ins, &outs}) {
    const double y = list == &ins ? y_h2d : y_d2h;
    for (const CopySpan& c : *list) {
      svg.Rect(X(c.start), y + 3, std::max(X(c.end) - X(c.start), 0.6), lane_h - 6, BlockColor(c.block), 0.85);
    }
    // Label runs of one block's copies.
    size_t i = 0;
    while (i < list->size()) {
      size_t j = i;
      // A run is one block's copies without a long pause (2% of the iteration) between them.
      while (j + 1 < list->size() && (*list)[j + 1].block == (*list)[i].block &&
             (*list)[j + 1].start - (*list)[j].end < 0.02 * s.iteration_s) {
        ++j;
      }
      const double x0 = X((*list)[i].start), x1 = X((*list)[j].end);
      if (x1 - x0 > 34) {
        const char* dir = list == &ins ? "in" : "out";
        const int blk = (*list)[i].block;
        svg.Text((x0 + x1) / 2, y + lane_h / 2 + 4,
                 blk >= 0 ? fmt::format("S{}{}", blk + 1, dir) : fmt::format("P{}", dir), 11, "middle", "#111",
                 "bold");
      }
      i = j + 1;
    }
  }
}

// The data-parallel pipeline's lanes from `y` down (gradients out, exchange groups, host update, parameters in),
// each piece in its group's color; returns the y below them.
template <typename ToX>
double PipelineLanes(Svg& svg, const policy::DataParallelResult& r, ToX X, double left, double width, double y,
                     double lane_h, double gap) {
  const std::pair<const std::vector<policy::PipelineSpan>*, const char*> lanes[] = {
      {&r.out, "gradients out"}, {&r.exchange, "exchange"}, {&r.update, "host update"}, {&r.in, "parameters in"}};
  for (const auto& [spans, name] : lanes) {
    svg.Rect(left, y, width, lane_h, "#f4f4f4");
    svg.Text(left - 10, y + lane_h / 2 + 4, name, 13, "end", "#222", "bold");
    for (const policy::PipelineSpan& p : *spans) {
      const double x0 = X(p.start_s), x1 = X(p.end_s);
      svg.Rect(x0, y + 3, std::max(x1 - x0, 0.6), lane_h - 6, BlockColor(p.group), 0.85);
      if (spans == &r.exchange && x1 - x0 > 22) {
        svg.Text((x0 + x1) / 2, y + lane_h / 2 + 4, fmt::format("G{}", p.group + 1), 11, "middle", "#111", "bold");
      }
    }
    y += lane_h + gap;
  }
  // Where the next iteration starts.
  svg.Line(X(r.iteration_s), y - 4 * (lane_h + gap), X(r.iteration_s), y - gap, "#b22", 1.5, "6,3");
  return y;
}

std::string PlanSvg(const policy::SimInput& in, const policy::Evaluation& e, const std::vector<policy::Stage>& stages,
                    const std::string& model, double ideal_s, const policy::DataParallelResult* pipeline = nullptr,
                    const std::string& pipeline_caption = "") {
  const double W = 1200, H = pipeline != nullptr ? 860 : 640;
  Svg svg(W, H);
  const policy::SimResult& s = e.sim;
  double end_s = s.iteration_s;
  if (pipeline != nullptr) {
    for (const auto* lane : {&pipeline->out, &pipeline->exchange, &pipeline->update, &pipeline->in}) {
      for (const policy::PipelineSpan& p : *lane) end_s = std::max(end_s, p.end_s);
    }
    end_s = std::max(end_s, pipeline->iteration_s);
  }
  const double total_ms = std::max(Ms(end_s), 1e-6);
  const double left = 150, width = W - left - 40;
  svg.Text(W / 2, 26,
           fmt::format("{} plan for {} on {}, capacity {}: {:.1f} ms per iteration ({:.2f}x in-core)", e.strategy,
                       model, policy::ProfileLabel(in.hw), FormatBytes(in.capacity), Ms(s.iteration_s),
                       s.iteration_s / ideal_s),
           16, "middle", "#111", "bold");
  svg.Text(W / 2, 46,
           fmt::format("compute busy {:.0f}% of the time (occupancy), stall {:.1f} ms, recompute {:.1f} ms, "
                       "{} in / {} out over PCIe",
                       100 * s.Occupancy(), Ms(s.stall_s), Ms(s.recompute_s), FormatBytes(s.swap_in_bytes),
                       FormatBytes(s.swap_out_bytes)),
           12, "middle", "#444");
  auto X = [&](double t_s) { return left + Ms(t_s) / total_ms * width; };

  // Lanes: compute stages, host-to-device and device-to-host copies.
  const double lane_h = 34, lane_gap = 14;
  const double y_compute = 70, y_h2d = y_compute + lane_h + lane_gap, y_d2h = y_h2d + lane_h + lane_gap;
  const std::pair<double, const char*> lanes[] = {
      {y_compute, "compute"}, {y_h2d, "host \u2192 device"}, {y_d2h, "device \u2192 host"}};
  for (const auto& [y, name] : lanes) {
    svg.Rect(left, y, width, lane_h, "#f4f4f4");
    svg.Text(left - 10, y + lane_h / 2 + 4, name, 13, "end", "#222", "bold");
  }
  ComputeLane(svg, s, stages, X, y_compute, lane_h);
  CopyLanes(svg, in, e, X, y_h2d, y_d2h, lane_h);
  double y_lanes_end = y_d2h + lane_h;
  if (pipeline != nullptr) {
    const double y_caption = y_d2h + lane_h + lane_gap + 12;
    svg.Text(W / 2, y_caption, pipeline_caption + " (dashed: where the next iteration starts)", 12, "middle", "#444");
    y_lanes_end = PipelineLanes(svg, *pipeline, X, left, width, y_caption + 10, lane_h, lane_gap) - lane_gap;
  }
  // Memory in use over time, against the capacity.
  const MemoryUnit unit = MemoryUnitFor(std::max(s.peak_bytes, in.capacity));
  const double ymax = std::max(unit.Of(std::max(s.peak_bytes, in.capacity)) * 1.12, 0.01);
  Axes ax{left, y_lanes_end + 40, width, H - (y_lanes_end + 40) - 80, 0, total_ms, 0, ymax};
  std::vector<std::pair<double, double>> pts;
  for (size_t i = 0; i < s.memory.size(); ++i) {
    const double y = ax.Y(unit.Of(s.memory[i].second));
    if (i > 0) pts.emplace_back(ax.X(Ms(s.memory[i].first)), pts.back().second);
    pts.emplace_back(ax.X(Ms(s.memory[i].first)), y);
  }
  if (!pts.empty()) pts.emplace_back(ax.X(total_ms), pts.back().second);
  ax.Draw(svg, "time in the iteration (ms)", fmt::format("device memory in use ({})", unit.name), "%.0f",
          unit.tick_format);
  svg.Poly(pts, "#3b6fb6", "#1f4e8c", 1.0, ax.Y(0), 0.45);
  const double cy = ax.Y(unit.Of(in.capacity));
  svg.Line(ax.left, cy, ax.left + ax.width, cy, "#b22", 1.5, "8,4");
  svg.Text(ax.left + ax.width - 4, cy - 6, "capacity " + FormatBytes(in.capacity), 11, "end", "#b22", "bold");
  // Tick marks of the shared time axis on the lanes too.
  for (double v : NiceTicks(0, total_ms, 8)) svg.Line(ax.X(v), y_compute, ax.X(v), y_lanes_end, "#ddd", 0.6);

  // Legend.
  double lx = left;
  const double ly = H - 24;
  const std::pair<policy::Stage::Kind, const char*> kinds[] = {{policy::Stage::kForward, "forward block Fi"},
                                                                {policy::Stage::kBackward, "backward block Bi"},
                                                                {policy::Stage::kRecompute, "recompute Ri"},
                                                                {policy::Stage::kUpdate, "optimizer U"}};
  for (const auto& [k, name] : kinds) {
    svg.Rect(lx, ly - 10, 14, 10, StageColor(k));
    svg.Text(lx + 18, ly, name, 11);
    lx += 135;
  }
  svg.Rect(lx, ly - 5, 14, 5, "#555");
  svg.Text(lx + 18, ly, "stall", 11);
  lx += 70;
  svg.Text(lx, ly, "copies: Si block i's data, P (grey) weights, grads, optimizer state", 11, "start", "#444");
  return svg.Finish();
}

int RunPlan(const PlanArgs& a) {
  bool bad = false;
  const std::optional<policy::DataParallelOptions> dp = ResolveDataParallel(a.data_parallel, &bad);
  if (bad) return kExitUsage;
  auto p = ResolvePlanningInput(a.planning);
  if (!p) return kExitFailure;
  const policy::SimInput& in = p->in;
  const double ideal_s = policy::IdealSeconds(in.op_seconds);
  KarmaPlanning karma;
  policy::Evaluation e =
      EvaluateStrategy(a.planning, in, a.strategy, {.record_events = true, .record_memory = true}, &karma);
  if (!e.feasible) {
    if (a.json) {
      fmt::print("{}\n", nlohmann::json{{"strategy", a.strategy}, {"feasible", false}, {"reason", e.reason}}.dump(2));
      return kExitOk;
    }
    fmt::print("{} on {}, capacity {}: infeasible: {}\n", a.strategy, policy::ProfileLabel(in.hw), FormatBytes(in.capacity), e.reason);
    PrintKarmaPlanning(karma);
    return kExitOk;
  }
  if (Status st = policy::CheckSchedule(in, e.plan, e.sim); !st.ok()) return Fail(st);
  const std::vector<policy::Stage> stages = policy::BuildStages(in, e.plan, e.sim);
  const std::string notation = policy::StageNotation(stages, a.stages);
  const std::string model = p->it.model.empty() ? a.planning.file : p->it.model;
  std::optional<policy::DataParallelResult> pipeline;
  if (dp) pipeline = policy::SimulateDataParallel(in, e.plan, e.sim, *dp);
  const policy::DataParallelResult* drawn = pipeline && pipeline->feasible ? &*pipeline : nullptr;
  if (!a.svg.empty()) {
    const std::string caption = drawn != nullptr ? PipelineCaption(*dp, *drawn) : "";
    if (Status st = trace::WriteFileAtomically(a.svg, PlanSvg(in, e, stages, model, ideal_s, drawn, caption));
        !st.ok()) {
      return Fail(st);
    }
  }
  if (!a.save.empty()) {
    if (Status st = policy::WritePlanFile(a.save, e.plan); !st.ok()) return Fail(st);
  }
  const std::vector<policy::Block> blocks = policy::DisplayBlocks(in, e.plan);
  if (a.json) {
    nlohmann::json j;
    j["strategy"] = e.strategy;
    j["feasible"] = true;
    j["iteration_ms"] = Ms(e.sim.iteration_s);
    j["ideal_ms"] = Ms(ideal_s);
    j["notation"] = notation;
    j["note"] = e.plan.note;
    for (const policy::Stage& st : stages) {
      j["stages"].push_back({{"label", st.Label()}, {"start_ms", Ms(st.start_s)}, {"end_ms", Ms(st.end_s)},
                             {"copies", st.copies}});
    }
    for (const policy::Block& b : blocks) {
      j["blocks"].push_back({{"first_op", b.first_op}, {"last_op", b.last_op}, {"mode", policy::Name(b.mode)}});
    }
    if (karma.ran) j.update(KarmaPlanningJson(karma));
    if (pipeline) AddDataParallelJson(*dp, *pipeline, &j);
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  fmt::print("{} plan for {} on {}, capacity {} (in-core peak {})\n", e.strategy, model, policy::ProfileLabel(in.hw),
             FormatBytes(in.capacity), FormatBytes(p->ideal_peak));
  fmt::print("{:.1f} ms per iteration, {:.2f}x in-core ({:.1f} ms); occupancy {:.0f}%\n", Ms(e.sim.iteration_s),
             e.sim.iteration_s / ideal_s, Ms(ideal_s), 100 * e.sim.Occupancy());
  if (!e.plan.note.empty()) fmt::print("{}\n", e.plan.note);
  if (pipeline) PrintDataParallel(*dp, *pipeline);
  PrintKarmaPlanning(karma);
  fmt::print("\nstages (Fi, Bi: forward, backward of block i; Ri: its recompute; U: optimizer; A||B: B beside A;\n"
             "Siout, Siin: block i's data to, from the host; Pout, Pin: weights, gradients, optimizer state):\n{}\n\n",
             notation);
  TextTable bt;
  for (const char* c : {"block", "ops", "mode", "saved data"}) {
    bt.AddColumn(c, std::string(c) == "mode" ? TextTable::kLeft : TextTable::kRight);
  }
  const std::vector<int> owner = policy::BufferBlocks(in, blocks);
  std::vector<uint64_t> saved(blocks.size(), 0);
  for (size_t x = 0; x < owner.size(); ++x) {
    if (owner[x] >= 0 && !in.access.persistent[x]) saved[static_cast<size_t>(owner[x])] += p->it.buffers[x].bytes;
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    bt.AddRow({fmt::format("{}", i + 1), fmt::format("{}-{}", blocks[i].first_op, blocks[i].last_op),
               e.plan.blocks.empty() ? "-" : policy::Name(blocks[i].mode), FormatBytes(saved[i])});
  }
  bt.Print();
  if (e.plan.blocks.empty()) fmt::print("({} makes no blocks: these are display blocks of equal layer counts)\n", e.strategy);
  if (!a.svg.empty()) fmt::print("\nwrote {}\n", a.svg);
  if (!a.save.empty()) fmt::print("wrote {}\n", a.save);
  return kExitOk;
}

}  // namespace

void RegisterPlan(CLI::App& app, Action* selected) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* sub = AddCommand(app, "plan",
                             "A strategy's plan (default karma) as stages in the paper's notation (F1 -> F2||S1out -> "
                             "... -> B6||S3in), its blocks, and with --svg a picture of the compute, host-to-device "
                             "and device-to-host lanes and the memory in use over the iteration.",
                             selected, [args] { return RunPlan(*args); });
  AddPlanningOptions(sub, &args->planning);
  AddDataParallelOptions(sub, &args->data_parallel);
  std::vector<std::string> names;
  for (const policy::StrategyInfo& i : policy::AllStrategies()) {
    if (i.has_plan) names.push_back(i.name);
  }
  sub->add_option("--strategy", args->strategy, "one of the strategies with a plan: " + policy::StrategyNames() +
                                                    " but um")
      ->capture_default_str()
      ->check(CLI::IsMember(names));
  sub->add_option("--svg", args->svg, "write the timeline picture as SVG to this file");
  sub->add_option("--save", args->save, "write the plan as karma-plan JSON to this file");
  sub->add_option("--stages", args->stages, "print at most this many stages")->capture_default_str();
  sub->footer("Notation: Fi, Bi = forward, backward compute of block i; Ri = its recompute; U = optimizer; "
              "A||B = B runs beside A; Siout, Siin = block i's data to and from the host; Pout, Pin = weights, "
              "gradients, optimizer state.");
  sub->add_flag("--json", args->json, "print stages and blocks as JSON");
}

}  // namespace karma::tools
