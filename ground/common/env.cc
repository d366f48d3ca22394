// Validation and typed access for the KARMA_* table.
#include "ground/common/env.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <string>

extern char** environ;

namespace karma {
namespace {

constexpr EnvVarInfo kInfos[] = {
#define KARMA_ENV_INFO(name, type, def, choices, help) {EnvVar::name, #name, EnvType::type, def, choices, help},
    KARMA_ENV_TABLE(KARMA_ENV_INFO)
#undef KARMA_ENV_INFO
};
static_assert(std::size(kInfos) == static_cast<size_t>(EnvVar::kCount));

bool InChoices(std::string_view choices, std::string_view value) {
  size_t start = 0;
  while (start <= choices.size()) {
    size_t bar = choices.find('|', start);
    if (bar == std::string_view::npos) bar = choices.size();
    if (choices.substr(start, bar - start) == value) return true;
    start = bar + 1;
  }
  return false;
}

bool ParseBool(std::string_view v, bool* out) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") { *out = true; return true; }
  if (v == "0" || v == "false" || v == "no" || v == "off") { *out = false; return true; }
  return false;
}

bool ParseInt(std::string_view v, int64_t* out) {
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
  return ec == std::errc() && end == v.data() + v.size();
}

}  // namespace

std::span<const EnvVarInfo> AllEnvVars() { return kInfos; }
const EnvVarInfo& InfoOf(EnvVar var) { return kInfos[static_cast<size_t>(var)]; }

const char* EnvTypeName(EnvType type) {
  switch (type) {
    case EnvType::kCapacity: return "capacity";
    case EnvType::kBytes: return "bytes";
    case EnvType::kEnum: return "enum";
    case EnvType::kPath: return "path";
    case EnvType::kString: return "string";
    case EnvType::kBool: return "bool";
    case EnvType::kInt: return "int";
  }
  return "?";
}

std::string AcceptedForms(const EnvVarInfo& info) {
  switch (info.type) {
    case EnvType::kCapacity: return kCapacityForms;
    case EnvType::kBytes: return kBytesForms;
    case EnvType::kEnum: return std::string("one of ") + info.choices;
    case EnvType::kPath: return "a file-system path";
    case EnvType::kString: return "any text";
    case EnvType::kBool: return "1|0|true|false|yes|no|on|off";
    case EnvType::kInt: return "a decimal integer";
  }
  return "";
}

Status ValidateEnvValue(const EnvVarInfo& info, std::string_view value) {
  bool ok = true;
  switch (info.type) {
    case EnvType::kCapacity: ok = ParseCapacity(value).ok(); break;
    case EnvType::kBytes: ok = ParseBytes(value).ok(); break;
    case EnvType::kEnum: ok = InChoices(info.choices, value); break;
    case EnvType::kPath: ok = !value.empty(); break;
    case EnvType::kString: ok = true; break;
    case EnvType::kBool: { bool b; ok = ParseBool(value, &b); break; }
    case EnvType::kInt: { int64_t i; ok = ParseInt(value, &i); break; }
  }
  if (ok) return Status::Ok();
  return InvalidArgument(std::string(info.name) + "='" + std::string(value) + "' is not valid; accepted: " +
                         AcceptedForms(info));
}

EnvConfig::EnvConfig(const Getter& get, const std::vector<std::string>& names)
    : values_(std::size(kInfos)), set_(std::size(kInfos), false) {
  for (const EnvVarInfo& info : kInfos) {
    const size_t i = Index(info.var);
    values_[i] = info.default_value;
    const char* v = get(info.name);
    if (v == nullptr) continue;
    const Status st = ValidateEnvValue(info, v);
    if (!st.ok()) {
      problems_.push_back(st.message() + "; using the default " + info.default_value);
      continue;
    }
    values_[i] = v;
    set_[i] = true;
  }
  for (const std::string& name : names) {
    if (name.rfind("KARMA_", 0) != 0) continue;
    bool known = false;
    for (const EnvVarInfo& info : kInfos) known = known || name == info.name;
    if (!known) problems_.push_back(name + " is not a KARMA variable (see `karma-trace env`); ignored");
  }
}

EnvConfig EnvConfig::FromProcessEnvironment() {
  std::vector<std::string> names;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    names.emplace_back(kv.substr(0, kv.find('=')));
  }
  return EnvConfig([](const char* n) { return static_cast<const char*>(std::getenv(n)); }, names);
}

Capacity EnvConfig::capacity(EnvVar v) const {
  auto c = ParseCapacity(text(v));
  return c.ok() ? *c : *ParseCapacity(InfoOf(v).default_value);
}

uint64_t EnvConfig::bytes(EnvVar v) const {
  auto b = ParseBytes(text(v));
  return b.ok() ? *b : *ParseBytes(InfoOf(v).default_value);
}

bool EnvConfig::flag(EnvVar v) const {
  bool b = false;
  if (!ParseBool(text(v), &b)) ParseBool(InfoOf(v).default_value, &b);
  return b;
}

int64_t EnvConfig::integer(EnvVar v) const {
  int64_t i = 0;
  if (!ParseInt(text(v), &i)) ParseInt(InfoOf(v).default_value, &i);
  return i;
}

}  // namespace karma
