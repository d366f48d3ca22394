#include "runtime/plan/link_record.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "ground/trace/ktrace_io.h"

namespace karma::rt {

namespace {

using nlohmann::json;

constexpr int kFormat = 1;

}  // namespace

std::string LinkRecordPath(const std::string& dir, const std::string& device) {
  std::string name = device.empty() ? std::string("unknown") : device;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  }
  return (dir.empty() ? std::string(".") : dir) + "/link-" + name + ".json";
}

Result<LinkRecord> ReadLinkRecord(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return NotFound("no " + path);
  KARMA_ASSIGN_OR_RETURN(std::string text, trace::ReadWholeFile(path));
  auto bad = [&](const std::string& why) { return InvalidArgument(path + " is not a link record: " + why); };
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return bad("not a JSON object");
  if (!j.contains("format") || !j["format"].is_number_integer() || j["format"].get<int>() != kFormat) {
    return bad("format is not " + std::to_string(kFormat));
  }
  LinkRecord r;
  try {
    r.device = j.at("device").get<std::string>();
    r.h2d_bw = j.at("h2d_gb_per_s").get<double>() * 1e9;
    r.d2h_bw = j.at("d2h_gb_per_s").get<double>() * 1e9;
    if (j.contains("went_back")) r.went_back = j["went_back"].get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    return bad(e.what());
  }
  if (!(r.h2d_bw >= 0) || !(r.d2h_bw >= 0) || r.h2d_bw + r.d2h_bw <= 0) return bad("no positive rate");
  return r;
}

Status WriteLinkRecord(const std::string& path, const LinkRecord& record) {
  json j;
  j["format"] = kFormat;
  j["device"] = record.device;
  j["h2d_gb_per_s"] = record.h2d_bw / 1e9;
  j["d2h_gb_per_s"] = record.d2h_bw / 1e9;
  j["went_back"] = record.went_back;
  return trace::WriteFileAtomically(path, j.dump(2) + "\n");
}

void MarkWentBack(LinkRecord* record, const std::string& key, bool went_back) {
  auto& keys = record->went_back;
  keys.erase(std::remove(keys.begin(), keys.end(), key), keys.end());
  if (!went_back) return;
  keys.push_back(key);
  if (keys.size() > LinkRecord::kMaxWentBack) keys.erase(keys.begin(), keys.end() - LinkRecord::kMaxWentBack);
}

}  // namespace karma::rt
