// `karma-trace env`: every KARMA_* variable from the runtime's single table, and the current environment's values.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ground/common/env.h"
#include "tools/karma-trace/commands.h"

namespace karma::tools {
namespace {

struct EnvArgs {
  bool json = false;
  bool check = false;
};

int RunEnv(const EnvArgs& a) {
  const EnvConfig cfg = EnvConfig::FromProcessEnvironment();
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const EnvVarInfo& v : AllEnvVars()) {
      rows.push_back({{"name", v.name}, {"type", EnvTypeName(v.type)}, {"default", v.default_value},
                      {"accepted", AcceptedForms(v)}, {"help", v.help}, {"value", cfg.text(v.var)},
                      {"set", cfg.is_set(v.var)}});
    }
    fmt::print("{}\n", nlohmann::json{{"variables", rows}, {"problems", cfg.problems()}}.dump(2));
  } else if (!a.check) {
    for (const EnvVarInfo& v : AllEnvVars()) {
      fmt::print("{}  ({}, default {})\n", v.name, EnvTypeName(v.type), v.default_value);
      fmt::print("    {}\n", v.help);
      fmt::print("    accepted: {}\n", AcceptedForms(v));
      if (cfg.is_set(v.var)) fmt::print("    now: {}\n", cfg.text(v.var));
    }
  }
  for (const std::string& p : cfg.problems()) fmt::print(stderr, "{}: error: {}\n", ProgramName(), p);
  if (a.check && cfg.problems().empty()) fmt::print("all KARMA_* variables are valid\n");
  return a.check && !cfg.problems().empty() ? kExitFailure : kExitOk;
}

}  // namespace

void RegisterEnv(CLI::App& app, Action* selected) {
  auto args = std::make_shared<EnvArgs>();
  CLI::App* sub = AddCommand(app, "env",
                             "List every KARMA_* environment variable (type, default, accepted values, help) and "
                             "report invalid or unknown ones in the current environment.",
                             selected, [args] { return RunEnv(*args); });
  sub->add_flag("--json", args->json, "print JSON instead of text");
  sub->add_flag("--check", args->check, "only validate the current environment; exit 1 if a value is rejected");
}

}  // namespace karma::tools
