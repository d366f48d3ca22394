// `karma-trace memory`: live bytes over the iteration (ideal in-core), as text and as an SVG plot.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "ground/common/units.h"
#include "ground/trace/analysis.h"
#include "ground/trace/ktrace_io.h"
#include "tools/karma-trace/commands.h"
#include "tools/karma-trace/svg.h"

namespace karma::tools {
namespace {

struct MemoryArgs {
  std::string file;
  std::string svg;
  std::string capacity;
  size_t rows = 32;
  bool json = false;
};

// Maximal runs of consecutive ops in one phase.
struct PhaseRun {
  trace::Phase phase;
  uint32_t begin, end;  // [begin, end)
};

std::vector<PhaseRun> PhaseRuns(const trace::Iteration& it) {
  std::vector<PhaseRun> runs;
  for (const trace::Op& op : it.ops) {
    if (runs.empty() || runs.back().phase != op.phase) runs.push_back({op.phase, op.id, op.id + 1});
    else runs.back().end = op.id + 1;
  }
  return runs;
}

const char* PhaseColor(trace::Phase p) {
  switch (p) {
    case trace::Phase::kForward: return "#cfe3f7";
    case trace::Phase::kBackward: return "#fbe0c4";
    case trace::Phase::kOptimizer: return "#d5efd0";
    case trace::Phase::kUnknown: break;
  }
  return "#eeeeee";
}

std::string MemorySvg(const trace::Iteration& it, const trace::MemoryCurve& m, uint64_t capacity) {
  const double W = 1000, H = 460;
  Svg svg(W, H);
  const MemoryUnit unit = MemoryUnitFor(std::max(m.peak_bytes, capacity));
  double ymax = unit.Of(std::max(m.peak_bytes, capacity)) * 1.08;
  if (ymax <= 0) ymax = 1;
  Axes ax{80, 56, W - 110, H - 126, 0, static_cast<double>(std::max<size_t>(it.ops.size(), 1)), 0, ymax};
  svg.Text(W / 2, 24,
           fmt::format("Live memory over one iteration (ideal in-core): {}{}", it.model.empty() ? "iteration" : it.model,
                       it.batch ? fmt::format(", batch {}", it.batch) : ""),
           15, "middle", "#111", "bold");
  for (const PhaseRun& r : PhaseRuns(it)) {
    svg.Rect(ax.X(r.begin), ax.top, ax.X(r.end) - ax.X(r.begin), ax.height, PhaseColor(r.phase), 0.7);
    if (ax.X(r.end) - ax.X(r.begin) > 60) {
      svg.Text((ax.X(r.begin) + ax.X(r.end)) / 2, ax.top - 6, trace::Name(r.phase), 11, "middle", "#555");
    }
  }
  ax.Draw(svg, "op (execution order)", fmt::format("live memory ({})", unit.name), "%.0f", unit.tick_format);
  std::vector<std::pair<double, double>> pts;
  pts.reserve(it.ops.size() * 2);
  for (size_t i = 0; i < m.live.size(); ++i) {
    const double y = ax.Y(unit.Of(m.live[i]));
    pts.emplace_back(ax.X(static_cast<double>(i)), y);
    pts.emplace_back(ax.X(static_cast<double>(i + 1)), y);
  }
  svg.Poly(pts, "#3b6fb6", "#1f4e8c", 1.0, ax.Y(0), 0.55);
  const double py = ax.Y(unit.Of(m.persistent_bytes));
  svg.Line(ax.left, py, ax.left + ax.width, py, "#2a7a2a", 1.5, "6,3");
  svg.Text(ax.left + ax.width - 4, py - 5, "persistent " + FormatBytes(m.persistent_bytes), 11, "end", "#2a7a2a");
  if (m.peak_op != trace::kNone) {
    const double x = ax.X(m.peak_op + 0.5), y = ax.Y(unit.Of(m.peak_bytes));
    svg.Raw(fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="4" fill="#b22"/>)", x, y));
    const bool right = x < ax.left + ax.width * 0.7;
    svg.Text(x + (right ? 8 : -8), y - 6, fmt::format("peak {} at op {}", FormatBytes(m.peak_bytes), m.peak_op), 12,
             right ? "start" : "end", "#b22", "bold");
  }
  if (capacity > 0) {
    const double cy = ax.Y(unit.Of(capacity));
    svg.Line(ax.left, cy, ax.left + ax.width, cy, "#b22", 1.5, "8,4");
    svg.Text(ax.left + 4, cy - 5, "capacity " + FormatBytes(capacity), 11, "start", "#b22");
  }
  // Legend.
  double lx = ax.left;
  for (trace::Phase p : {trace::Phase::kForward, trace::Phase::kBackward, trace::Phase::kOptimizer}) {
    svg.Rect(lx, H - 22, 14, 10, PhaseColor(p));
    svg.Text(lx + 18, H - 13, trace::Name(p), 11);
    lx += 100;
  }
  svg.Rect(lx, H - 22, 14, 10, "#3b6fb6", 0.55);
  svg.Text(lx + 18, H - 13, "live bytes (buffers between first and last use, plus persistent)", 11);
  return svg.Finish();
}

int RunMemory(const MemoryArgs& a) {
  uint64_t capacity = 0;
  if (!a.capacity.empty()) {
    auto c = ParseBytes(a.capacity);
    if (!c.ok()) return Fail(c.status().WithContext("--capacity"));
    capacity = *c;
  }
  trace::Iteration it;
  if (!LoadOrReport(a.file, &it)) return kExitFailure;
  const trace::MemoryCurve m = trace::IdealMemory(it, trace::ComputeLifetimes(it));
  if (!a.svg.empty()) {
    Status st = trace::WriteFileAtomically(a.svg, MemorySvg(it, m, capacity));
    if (!st.ok()) return Fail(st);
  }
  if (a.json) {
    nlohmann::json j = {{"persistent_bytes", m.persistent_bytes}, {"peak_bytes", m.peak_bytes},
                        {"peak_op", m.peak_op == trace::kNone ? nlohmann::json(nullptr) : nlohmann::json(m.peak_op)},
                        {"live_bytes", m.live}};
    fmt::print("{}\n", j.dump());
    return kExitOk;
  }
  fmt::print("live memory over the iteration (ideal in-core: each buffer lives from its first to its last use)\n");
  fmt::print("persistent {}, peak {}", FormatBytes(m.persistent_bytes), FormatBytes(m.peak_bytes));
  if (m.peak_op != trace::kNone) fmt::print(" at op {} ({})", m.peak_op, it.ops[m.peak_op].name);
  fmt::print("\n\n");
  if (it.ops.empty()) return kExitOk;
  const size_t rows = std::clamp<size_t>(a.rows, 1, it.ops.size());
  const int bar_width = 50;
  fmt::print("{:>13}  {:<9}  {:>10}\n", "ops", "phase", "max GiB");
  for (size_t r = 0; r < rows; ++r) {
    const size_t b = r * it.ops.size() / rows, e = (r + 1) * it.ops.size() / rows;
    uint64_t peak = 0;
    for (size_t i = b; i < e; ++i) peak = std::max(peak, m.live[i]);
    const int len = m.peak_bytes ? static_cast<int>(bar_width * static_cast<double>(peak) / m.peak_bytes + 0.5) : 0;
    fmt::print("{:>6}-{:<6}  {:<9}  {:>10.2f}  {}\n", b, e - 1, trace::Name(it.ops[b].phase), ToGiB(peak),
               std::string(static_cast<size_t>(len), '#'));
  }
  if (!a.svg.empty()) fmt::print("\nwrote {}\n", a.svg);
  return kExitOk;
}

}  // namespace

void RegisterMemory(CLI::App& app, Action* selected) {
  auto args = std::make_shared<MemoryArgs>();
  CLI::App* sub = AddCommand(app, "memory",
                             "Live bytes over the iteration when every buffer lives from its first to its last use: "
                             "a text chart, and an SVG plot with --svg.",
                             selected, [args] { return RunMemory(*args); });
  sub->add_option("FILE", args->file, "a .ktrace or karma-graph JSON file")->required();
  sub->add_option("--svg", args->svg, "also write the plot as SVG to this file");
  sub->add_option("--capacity", args->capacity, "draw a device-capacity line at these bytes (e.g. 16GiB)");
  sub->add_option("--rows", args->rows, "rows of the text chart")->capture_default_str();
  sub->add_flag("--json", args->json, "print the curve as JSON (live bytes per op) instead of text");
}

}  // namespace karma::tools
