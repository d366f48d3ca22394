// Reading and validating the KARMA_* variables declared in env_table.h.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ground/common/env_table.h"
#include "ground/common/status.h"
#include "ground/common/units.h"

namespace karma {

struct EnvVarInfo {
  EnvVar var;
  const char* name;
  EnvType type;
  const char* default_value;
  const char* choices;  // "a|b|c" for enums, "" otherwise
  const char* help;
};

std::span<const EnvVarInfo> AllEnvVars();
const EnvVarInfo& InfoOf(EnvVar var);
const char* EnvTypeName(EnvType type);
// The accepted forms of a variable, for messages ("one of auto|record|...", "bytes with a unit ...").
std::string AcceptedForms(const EnvVarInfo& info);
// OK when `value` is acceptable for the variable; otherwise a message naming it and the accepted forms.
Status ValidateEnvValue(const EnvVarInfo& info, std::string_view value);

// The effective configuration: every variable's value, or its default where unset or invalid.
class EnvConfig {
 public:
  using Getter = std::function<const char*(const char*)>;
  // `get` returns the value of a variable or nullptr; `names` lists every variable set (to spot typos).
  EnvConfig(const Getter& get, const std::vector<std::string>& names);
  static EnvConfig FromProcessEnvironment();

  bool is_set(EnvVar v) const { return set_[Index(v)]; }
  const std::string& text(EnvVar v) const { return values_[Index(v)]; }
  Capacity capacity(EnvVar v) const;
  uint64_t bytes(EnvVar v) const;
  bool flag(EnvVar v) const;
  int64_t integer(EnvVar v) const;

  // One message per rejected value (the default is used instead) and per unknown KARMA_* name.
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  static size_t Index(EnvVar v) { return static_cast<size_t>(v); }
  std::vector<std::string> values_;
  std::vector<bool> set_;
  std::vector<std::string> problems_;
};

}  // namespace karma
