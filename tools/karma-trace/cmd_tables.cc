// `karma-trace ops` and `karma-trace buffers`: sortable tables of an iteration's ops and buffers.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "policy/cost.h"
#include "ground/common/units.h"
#include "ground/trace/analysis.h"
#include "tools/karma-trace/commands.h"
#include "tools/karma-trace/table.h"

namespace karma::tools {
namespace {

struct OpsArgs {
  std::string file;
  std::string sort = "id";
  std::string gpu = policy::DefaultProfile().name;
  size_t top = 0;
  bool json = false;
};

struct BuffersArgs {
  std::string file;
  std::string sort = "id";
  size_t top = 0;
  bool json = false;
};

std::string IdList(const std::vector<trace::BufferId>& ids) {
  std::string s;
  for (trace::BufferId b : ids) s += (s.empty() ? "" : ",") + std::to_string(b);
  return s;
}

// Sorts indices by a key, descending for quantities, ascending for ids and names; stable on ties.
template <typename Key>
std::vector<uint32_t> SortedIndex(size_t n, Key key, bool descending) {
  std::vector<uint32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0u);
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
    return descending ? key(b) < key(a) : key(a) < key(b);
  });
  return idx;
}

int RunOps(const OpsArgs& a) {
  auto hw = policy::FindProfile(a.gpu);
  if (!hw.ok()) return Fail(hw.status());
  trace::Iteration it;
  if (!LoadOrReport(a.file, &it)) return kExitFailure;
  std::vector<double> seconds(it.ops.size());
  for (size_t i = 0; i < it.ops.size(); ++i) seconds[i] = policy::OpSeconds(it.ops[i], *hw);

  std::vector<uint32_t> order;
  const auto& ops = it.ops;
  if (a.sort == "id") order = SortedIndex(ops.size(), [](uint32_t i) { return i; }, false);
  else if (a.sort == "time") order = SortedIndex(ops.size(), [&](uint32_t i) { return seconds[i]; }, true);
  else if (a.sort == "flops") order = SortedIndex(ops.size(), [&](uint32_t i) { return ops[i].flops; }, true);
  else if (a.sort == "bytes") order = SortedIndex(ops.size(), [&](uint32_t i) { return ops[i].bytes; }, true);
  else order = SortedIndex(ops.size(), [&](uint32_t i) { return ops[i].name; }, false);
  if (a.top > 0 && order.size() > a.top) order.resize(a.top);

  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (uint32_t i : order) {
      const trace::Op& op = ops[i];
      rows.push_back({{"id", op.id}, {"name", op.name}, {"phase", trace::Name(op.phase)},
                      {"kind", trace::Name(op.kind)}, {"flops", op.flops}, {"bytes", op.bytes},
                      {"duration_ns", op.duration_ns}, {"time_ms", seconds[i] * 1e3}, {"stream", op.stream},
                      {"reads", op.reads}, {"writes", op.writes}, {"touches", op.touches}});
    }
    fmt::print("{}\n", rows.dump(1));
    return kExitOk;
  }
  TextTable t;
  t.AddColumn("id", TextTable::kRight);
  t.AddColumn("phase", TextTable::kLeft);
  t.AddColumn("kind", TextTable::kLeft);
  t.AddColumn("GFLOP", TextTable::kRight);
  t.AddColumn("MiB", TextTable::kRight);
  // "ms" when every op was measured, "est ms" when none was; in a mix, estimates carry a '*'.
  const size_t measured = static_cast<size_t>(
      std::count_if(ops.begin(), ops.end(), [](const trace::Op& op) { return op.duration_ns > 0; }));
  const bool mixed = measured > 0 && measured < ops.size();
  t.AddColumn(measured == ops.size() && !ops.empty() ? "ms" : (mixed ? "ms (*est)" : "est ms"), TextTable::kRight);
  t.AddColumn("reads", TextTable::kLeft);
  t.AddColumn("writes", TextTable::kLeft);
  t.AddColumn("name", TextTable::kLeft);
  for (uint32_t i : order) {
    const trace::Op& op = ops[i];
    t.AddRow({std::to_string(op.id), trace::Name(op.phase), trace::Name(op.kind),
              fmt::format("{:.3f}", static_cast<double>(op.flops) * 1e-9),
              fmt::format("{:.2f}", static_cast<double>(op.bytes) / kMiB), fmt::format("{:.4f}{}", seconds[i] * 1e3, mixed && op.duration_ns == 0 ? "*" : ""),
              IdList(op.reads), IdList(op.writes), op.name});
  }
  t.Print();
  return kExitOk;
}

int RunBuffers(const BuffersArgs& a) {
  trace::Iteration it;
  if (!LoadOrReport(a.file, &it)) return kExitFailure;
  const auto lt = trace::ComputeLifetimes(it);
  const std::vector<uint32_t> held = trace::HeldMemory(it, lt).held_until;
  const auto& bufs = it.buffers;
  auto span = [&](uint32_t i) -> uint64_t {
    if (lt[i].persistent) return it.ops.size();
    return lt[i].first == trace::kNone ? 0 : lt[i].last - lt[i].first + 1;
  };
  // Bytes times ops the application holds it past its last use.
  auto late = [&](uint32_t i) -> uint64_t {
    return held[i] == trace::kNone ? 0 : bufs[i].bytes * (held[i] - lt[i].last);
  };
  std::vector<uint32_t> order;
  if (a.sort == "id") order = SortedIndex(bufs.size(), [](uint32_t i) { return i; }, false);
  else if (a.sort == "bytes") order = SortedIndex(bufs.size(), [&](uint32_t i) { return bufs[i].bytes; }, true);
  else if (a.sort == "lifetime") order = SortedIndex(bufs.size(), span, true);
  else if (a.sort == "late") order = SortedIndex(bufs.size(), late, true);
  else order = SortedIndex(bufs.size(), [&](uint32_t i) { return static_cast<int>(bufs[i].kind); }, false);
  if (a.top > 0 && order.size() > a.top) order.resize(a.top);

  auto op_or_dash = [](uint32_t op) { return op == trace::kNone ? std::string("-") : std::to_string(op); };
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (uint32_t i : order) {
      const trace::Buffer& b = bufs[i];
      nlohmann::json r = {{"id", b.id}, {"kind", trace::Name(b.kind)}, {"bytes", b.bytes}, {"dtype", b.dtype},
                          {"persistent", lt[i].persistent}, {"site", b.site}, {"address", b.address}};
      r["first_op"] = lt[i].first == trace::kNone ? nlohmann::json(nullptr) : nlohmann::json(lt[i].first);
      r["last_op"] = lt[i].last == trace::kNone ? nlohmann::json(nullptr) : nlohmann::json(lt[i].last);
      r["held_until_op"] = held[i] == trace::kNone ? nlohmann::json(nullptr) : nlohmann::json(held[i]);
      rows.push_back(std::move(r));
    }
    fmt::print("{}\n", rows.dump(1));
    return kExitOk;
  }
  TextTable t;
  t.AddColumn("id", TextTable::kRight);
  t.AddColumn("kind", TextTable::kLeft);
  t.AddColumn("size", TextTable::kRight);
  t.AddColumn("dtype", TextTable::kLeft);
  t.AddColumn("life", TextTable::kLeft);
  t.AddColumn("first", TextTable::kRight);
  t.AddColumn("last", TextTable::kRight);
  t.AddColumn("held", TextTable::kRight);
  t.AddColumn("site", TextTable::kLeft);
  for (uint32_t i : order) {
    const trace::Buffer& b = bufs[i];
    t.AddRow({std::to_string(b.id), trace::Name(b.kind), FormatBytes(b.bytes), b.dtype,
              lt[i].persistent ? "persistent" : "transient", op_or_dash(lt[i].first), op_or_dash(lt[i].last),
              op_or_dash(held[i]), b.site});
  }
  t.Print();
  return kExitOk;
}

}  // namespace

void RegisterTables(CLI::App& app, Action* selected) {
  auto ops = std::make_shared<OpsArgs>();
  CLI::App* o = AddCommand(app, "ops", "Table of the ops in execution order, with the time each takes on a GPU "
                           "profile (measured where the trace has it, roofline estimate otherwise).",
                           selected, [ops] { return RunOps(*ops); });
  o->add_option("FILE", ops->file, "a .ktrace or karma-graph JSON file")->required();
  o->add_option("--sort", ops->sort, "order of the rows")
      ->check(CLI::IsMember({"id", "time", "flops", "bytes", "name"}))
      ->capture_default_str();
  o->add_option("--top", ops->top, "print only the first N rows after sorting (0: all)");
  o->add_option("--gpu", ops->gpu, "GPU profile for estimated times: " + policy::ProfileNames())
      ->capture_default_str();
  o->add_flag("--json", ops->json, "print a JSON array instead of text");

  auto bufs = std::make_shared<BuffersArgs>();
  CLI::App* b = AddCommand(app, "buffers", "Table of the buffers: kind, size, lifetime (first and last op that "
                           "uses them), the last op the application holds it through when it frees it later "
                           "(held), and allocation site.",
                           selected, [bufs] { return RunBuffers(*bufs); });
  b->add_option("FILE", bufs->file, "a .ktrace or karma-graph JSON file")->required();
  b->add_option("--sort", bufs->sort, "order of the rows")
      ->check(CLI::IsMember({"id", "bytes", "lifetime", "kind", "late"}))
      ->capture_default_str();
  b->add_option("--top", bufs->top, "print only the first N rows after sorting (0: all)");
  b->add_flag("--json", bufs->json, "print a JSON array instead of text");
}

}  // namespace karma::tools
