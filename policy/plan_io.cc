// JSON reading and writing of plans, with the format version checked on read.
#include "policy/plan_io.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ground/trace/ktrace_io.h"

namespace karma::policy {
namespace {

using nlohmann::json;

json OptionalOp(uint32_t op) { return op == trace::kNone ? json(nullptr) : json(op); }

Result<uint32_t> ReadOptionalOp(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return trace::kNone;
  if (!j[key].is_number_unsigned()) return Corrupt(fmt::format("'{}' must be an op index or null", key));
  return j[key].get<uint32_t>();
}

}  // namespace

std::string PlanToJson(const Plan& plan, int indent) {
  json j;
  j["format"] = "karma-plan";
  j["version"] = kPlanFormatVersion;
  j["strategy"] = plan.strategy;
  j["profile"] = plan.profile;
  j["capacity_bytes"] = plan.capacity_bytes;
  j["fingerprint"] = plan.fingerprint;
  j["note"] = plan.note;
  j["managed_memory"] = plan.managed_memory;
  j["host_resident"] = plan.host_resident;
  json blocks = json::array();
  for (const Block& b : plan.blocks) {
    blocks.push_back({{"first_op", b.first_op}, {"last_op", b.last_op}, {"mode", Name(b.mode)}});
  }
  j["blocks"] = std::move(blocks);
  json actions = json::array();
  for (const Action& a : plan.actions) {
    json x = {{"kind", Name(a.kind)}, {"after", a.after}, {"before", OptionalOp(a.before)}};
    if (a.kind == ActionKind::kRecompute) {
      x["ops"] = a.ops;
      if (!a.scratch.empty()) x["scratch"] = a.scratch;
    } else {
      x["buffer"] = a.buffer;
    }
    if (a.kind == ActionKind::kSwapOut) x["keep"] = a.keep;
    if (a.block >= 0) x["block"] = a.block;
    actions.push_back(std::move(x));
  }
  j["actions"] = std::move(actions);
  return j.dump(indent) + "\n";
}

Result<Plan> PlanFromJson(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt("not a JSON object");
  if (j.value("format", "") != "karma-plan") return Corrupt("not a karma-plan file (format field)");
  if (!j.contains("version") || !j["version"].is_number_integer()) return Corrupt("missing integer 'version'");
  const int version = j["version"].get<int>();
  if (version > kPlanFormatVersion) {
    return Unsupported(fmt::format("plan format version {} is newer than this build reads (version {})", version,
                                   kPlanFormatVersion));
  }
  if (version < 1) return Corrupt(fmt::format("plan format version {} is invalid", version));
  Plan p;
  try {
    p.strategy = j.value("strategy", "");
    p.profile = j.value("profile", "");
    p.capacity_bytes = j.value("capacity_bytes", uint64_t{0});
    p.fingerprint = j.value("fingerprint", "");
    p.note = j.value("note", "");
    p.managed_memory = j.value("managed_memory", false);  // absent in files written before paged ops existed
    if (j.contains("host_resident")) p.host_resident = j["host_resident"].get<std::vector<trace::BufferId>>();
    for (const json& b : j.value("blocks", json::array())) {
      Block blk;
      blk.first_op = b.at("first_op").get<uint32_t>();
      blk.last_op = b.at("last_op").get<uint32_t>();
      if (!ParseBlockMode(b.at("mode").get<std::string>(), &blk.mode)) {
        return Corrupt("unknown block mode '" + b.at("mode").get<std::string>() + "'");
      }
      p.blocks.push_back(blk);
    }
    for (const json& x : j.value("actions", json::array())) {
      Action a;
      const std::string kind = x.at("kind").get<std::string>();
      if (!ParseActionKind(kind, &a.kind)) return Corrupt("unknown action kind '" + kind + "'");
      a.after = x.at("after").get<int32_t>();
      KARMA_ASSIGN_OR_RETURN(a.before, ReadOptionalOp(x, "before"));
      if (a.kind == ActionKind::kRecompute) {
        a.ops = x.at("ops").get<std::vector<trace::OpId>>();
        if (x.contains("scratch")) a.scratch = x.at("scratch").get<std::vector<trace::BufferId>>();
      } else {
        a.buffer = x.at("buffer").get<trace::BufferId>();
      }
      a.keep = x.value("keep", false);
      a.block = x.value("block", -1);
      p.actions.push_back(std::move(a));
    }
  } catch (const json::exception& e) {
    return Corrupt(std::string("malformed plan: ") + e.what());
  }
  return p;
}

Status WritePlanFile(const std::string& path, const Plan& plan) {
  return trace::WriteFileAtomically(path, PlanToJson(plan));
}

Result<Plan> ReadPlanFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto plan = PlanFromJson(ss.str());
  if (!plan.ok()) return plan.status().WithContext(path);
  return plan;
}

}  // namespace karma::policy
