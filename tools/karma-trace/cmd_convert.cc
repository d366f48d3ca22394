// `karma-trace import` (karma-graph JSON -> .ktrace) and `export` (-> karma-graph JSON, Chrome trace events).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "policy/cost.h"
#include "ground/trace/analysis.h"
#include "ground/trace/graph_json.h"
#include "ground/trace/ktrace_io.h"
#include "tools/karma-trace/commands.h"

namespace karma::tools {
namespace {

struct ImportArgs {
  std::string input;
  std::string output;
};

struct ExportArgs {
  std::string file;
  std::string json_out;
  std::string chrome_out;
  std::string gpu = policy::DefaultProfile().name;
};

int RunImport(const ImportArgs& a) {
  trace::Iteration it;
  if (!LoadOrReport(a.input, &it)) return kExitFailure;
  Status st = trace::WriteKtraceFile(it, a.output);
  if (!st.ok()) return Fail(st);
  fmt::print("wrote {}: {} ops, {} buffers, {} events\n", a.output, it.ops.size(), it.buffers.size(),
             it.events.size());
  return kExitOk;
}

// Chrome / Perfetto trace-event JSON: ops as complete events on one track per stream, laid end to end
// (in-core, measured or roofline durations), plus a counter track of live memory.
std::string ChromeTrace(const trace::Iteration& it, const policy::HwProfile& hw) {
  using nlohmann::json;
  json events = json::array();
  const trace::MemoryCurve m = trace::IdealMemory(it, trace::ComputeLifetimes(it));
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1},
                    {"args", {{"name", fmt::format("{} on {}", it.model.empty() ? "iteration" : it.model, hw.name)}}}});
  double t_us = 0;
  for (const trace::Op& op : it.ops) {
    const double dur_us = policy::OpSeconds(op, hw) * 1e6;
    events.push_back({{"name", op.name},
                      {"cat", trace::Name(op.phase)},
                      {"ph", "X"},
                      {"ts", t_us},
                      {"dur", dur_us},
                      {"pid", 1},
                      {"tid", op.stream},
                      {"args",
                       {{"op", op.id}, {"kind", trace::Name(op.kind)}, {"flops", op.flops}, {"bytes", op.bytes},
                        {"measured", op.duration_ns > 0}, {"reads", op.reads}, {"writes", op.writes}}}});
    events.push_back({{"name", "live memory (GiB)"}, {"ph", "C"}, {"ts", t_us}, {"pid", 1},
                      {"args", {{"live", static_cast<double>(m.live[op.id]) / (1u << 30)}}}});
    t_us += dur_us;
  }
  json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return doc.dump() + "\n";
}

int RunExport(const ExportArgs& a) {
  if (a.json_out.empty() && a.chrome_out.empty()) {
    return Fail(InvalidArgument("export needs --json OUT and/or --chrome OUT"));
  }
  auto hw = policy::FindProfile(a.gpu);
  if (!hw.ok()) return Fail(hw.status());
  trace::Iteration it;
  if (!LoadOrReport(a.file, &it)) return kExitFailure;
  if (!a.json_out.empty()) {
    Status st = trace::WriteFileAtomically(a.json_out, trace::ToGraphJson(it));
    if (!st.ok()) return Fail(st);
    fmt::print("wrote {} (karma-graph JSON)\n", a.json_out);
  }
  if (!a.chrome_out.empty()) {
    Status st = trace::WriteFileAtomically(a.chrome_out, ChromeTrace(it, *hw));
    if (!st.ok()) return Fail(st);
    fmt::print("wrote {} (Chrome trace events; open in ui.perfetto.dev or chrome://tracing)\n", a.chrome_out);
  }
  return kExitOk;
}

}  // namespace

void RegisterConvert(CLI::App& app, Action* selected) {
  auto imp = std::make_shared<ImportArgs>();
  CLI::App* i = AddCommand(app, "import", "Convert a karma-graph JSON file into a .ktrace file.", selected,
                           [imp] { return RunImport(*imp); });
  i->add_option("GRAPH", imp->input, "karma-graph JSON (a .ktrace is accepted too)")->required();
  i->add_option("-o,--output", imp->output, "the .ktrace file to write")->required();

  auto exp = std::make_shared<ExportArgs>();
  CLI::App* e = AddCommand(app, "export",
                           "Write an iteration as karma-graph JSON (--json, lossless) and/or as Chrome/Perfetto "
                           "trace-event JSON (--chrome) with ops laid out in time on a GPU profile.",
                           selected, [exp] { return RunExport(*exp); });
  e->add_option("FILE", exp->file, "a .ktrace or karma-graph JSON file")->required();
  e->add_option("--json", exp->json_out, "karma-graph JSON output file");
  e->add_option("--chrome", exp->chrome_out, "Chrome trace-event JSON output file");
  e->add_option("--gpu", exp->gpu, "GPU profile for op times without a measured duration: " + policy::ProfileNames())
      ->capture_default_str();
}

}  // namespace karma::tools
