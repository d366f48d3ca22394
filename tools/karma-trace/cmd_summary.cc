// `karma-trace summary`: counts, work, persistent bytes, the ideal in-core peak of an iteration and, where the
// application frees memory after its last use, the peak of what it holds.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ground/common/units.h"
#include "ground/trace/analysis.h"
#include "ground/trace/load.h"
#include "tools/karma-trace/commands.h"

namespace karma::tools {
namespace {

std::string Quantity(double v, const char* unit) {
  static constexpr const char* kPrefix[] = {"", "K", "M", "G", "T", "P"};
  int p = 0;
  while (v >= 1000.0 && p < 5) {
    v /= 1000.0;
    ++p;
  }
  return fmt::format("{:.2f} {}{}", v, kPrefix[p], unit);
}

}  // namespace

int PrintSummary(const std::string& file, bool json) {
  trace::FileFormat format{};
  auto loaded = trace::LoadIteration(file, &format);
  if (!loaded.ok()) return Fail(loaded.status());
  const trace::Iteration& it = *loaded;
  const trace::Summary s = trace::Summarize(it);
  const char* format_name = format == trace::FileFormat::kKtrace ? "ktrace" : "karma-graph";
  const std::string peak_op_name = s.memory.peak_op != trace::kNone ? it.ops[s.memory.peak_op].name : "";

  if (json) {
    nlohmann::json j;
    j["file"] = file;
    j["format"] = format_name;
    j["model"] = it.model;
    j["batch"] = it.batch;
    j["source"] = it.source;
    j["ops"] = it.ops.size();
    for (int p = 0; p < trace::kPhaseCount; ++p) j["ops_by_phase"][trace::Name(trace::Phase(p))] = s.ops_by_phase[p];
    for (int k = 0; k < trace::kOpKindCount; ++k) j["ops_by_kind"][trace::Name(trace::OpKind(k))] = s.ops_by_kind[k];
    j["buffers"] = it.buffers.size();
    for (int k = 0; k < trace::kBufferKindCount; ++k) {
      j["buffers_by_kind"][trace::Name(trace::BufferKind(k))] = {{"count", s.buffers_by_kind[k].count},
                                                                   {"bytes", s.buffers_by_kind[k].bytes}};
    }
    j["events"] = it.events.size();
    j["flops"] = s.total_flops;
    j["op_bytes"] = s.total_op_bytes;
    j["measured_ns"] = s.measured_ns;
    j["ops_with_duration"] = s.ops_with_duration;
    j["persistent_bytes"] = s.memory.persistent_bytes;
    j["ideal_peak_bytes"] = s.memory.peak_bytes;
    j["ideal_peak_gib"] = ToGiB(s.memory.peak_bytes);
    j["ideal_peak_op"] = s.memory.peak_op == trace::kNone ? nlohmann::json(nullptr) : nlohmann::json(s.memory.peak_op);
    j["held_peak_bytes"] = s.held.memory.peak_bytes;
    j["held_peak_op"] =
        s.held.memory.peak_op == trace::kNone ? nlohmann::json(nullptr) : nlohmann::json(s.held.memory.peak_op);
    j["late_freed_buffers"] = s.held.late_buffers;
    j["most_late_bytes"] = s.held.most_late_bytes;
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }

  fmt::print("file        {} ({})\n", file, format_name);
  fmt::print("model       {}{}\n", it.model.empty() ? "(unnamed)" : it.model,
             it.batch ? fmt::format(", batch {}", it.batch) : "");
  if (!it.source.empty()) fmt::print("source      {}\n", it.source);
  std::string phases, kinds;
  for (int p = 0; p < trace::kPhaseCount; ++p) {
    if (s.ops_by_phase[p] == 0) continue;
    phases += fmt::format("{}{} {}", phases.empty() ? "" : ", ", trace::Name(trace::Phase(p)), s.ops_by_phase[p]);
  }
  for (int k = 0; k < trace::kOpKindCount; ++k) {
    if (s.ops_by_kind[k] == 0) continue;
    kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", trace::Name(trace::OpKind(k)), s.ops_by_kind[k]);
  }
  fmt::print("ops         {}{}{}\n", it.ops.size(), phases.empty() ? "" : ": ", phases);
  if (!kinds.empty()) fmt::print("            {}\n", kinds);
  fmt::print("buffers     {}, {} in all\n", it.buffers.size(), FormatBytes(s.buffer_bytes));
  for (int k = 0; k < trace::kBufferKindCount; ++k) {
    if (s.buffers_by_kind[k].count == 0) continue;
    fmt::print("  {:<10} {:>7}  {:>12}\n", trace::Name(trace::BufferKind(k)), s.buffers_by_kind[k].count,
               FormatBytes(s.buffers_by_kind[k].bytes));
  }
  if (!it.events.empty()) fmt::print("events      {}\n", it.events.size());
  fmt::print("work        {}, {} moved\n", Quantity(static_cast<double>(s.total_flops), "FLOP"),
             Quantity(static_cast<double>(s.total_op_bytes), "B"));
  if (s.ops_with_duration > 0) {
    fmt::print("measured    {:.3f} ms over {} ops\n", static_cast<double>(s.measured_ns) * 1e-6, s.ops_with_duration);
  }
  fmt::print("persistent  {}\n", FormatBytes(s.memory.persistent_bytes));
  if (s.memory.peak_op != trace::kNone) {
    fmt::print("ideal peak  {} at op {} ({}, {})\n", FormatBytes(s.memory.peak_bytes), s.memory.peak_op, peak_op_name,
               trace::Name(it.ops[s.memory.peak_op].phase));
  } else {
    fmt::print("ideal peak  {}\n", FormatBytes(s.memory.peak_bytes));
  }
  // Memory the application frees only well after the last use seen stays on the device under any plan.
  if (s.held.late_buffers > 0 && s.held.memory.peak_op != trace::kNone) {
    fmt::print("held peak   {} at op {} ({}): {} buffers freed after their last use, up to {} of them at once\n",
               FormatBytes(s.held.memory.peak_bytes), s.held.memory.peak_op, it.ops[s.held.memory.peak_op].name,
               s.held.late_buffers, FormatBytes(s.held.most_late_bytes));
  }
  return kExitOk;
}

void RegisterSummary(CLI::App& app, Action* selected) {
  struct SummaryArgs {
    std::string file;
    bool json = false;
  };
  auto args = std::make_shared<SummaryArgs>();
  CLI::App* sub = AddCommand(app, "summary",
                             "Model, op and buffer counts by phase and kind, total work, persistent bytes and the "
                             "ideal in-core peak (every non-persistent buffer freed right after its last use); for a "
                             "recording whose application frees buffers well after their last use, also the peak of "
                             "what it holds.",
                             selected, [args] { return PrintSummary(args->file, args->json); });
  sub->add_option("FILE", args->file, "a .ktrace or karma-graph JSON file")->required();
  sub->add_flag("--json", args->json, "print one JSON object instead of text");
}

}  // namespace karma::tools
