// What the `karma` and `karma-trace` programs share: adding a subcommand, reporting errors, parsing and running.
#include <fmt/format.h>

#include "tools/karma-trace/commands.h"

namespace karma::tools {
namespace {
std::string g_program = "karma-trace";
}  // namespace

const std::string& ProgramName() { return g_program; }

CLI::App* AddCommand(CLI::App& app, const std::string& name, const std::string& help, Action* selected,
                     Action action) {
  CLI::App* sub = app.add_subcommand(name, help);
  sub->callback([selected, action = std::move(action)] { *selected = action; });
  return sub;
}

int Fail(const Status& status) {
  fmt::print(stderr, "{}: error: {}\n", g_program, status.message());
  return kExitFailure;
}

void RegisterTraceCommands(CLI::App& app, Action* selected) {
  RegisterSummary(app, selected);
  RegisterTables(app, selected);
  RegisterMemory(app, selected);
  RegisterConvert(app, selected);
  RegisterEnv(app, selected);
  RegisterTop(app, selected);
  RegisterSimulate(app, selected);
  RegisterPlan(app, selected);
}

int RunCli(CLI::App& app, const Action& selected, int argc, char** argv) {
  g_program = app.get_name();
  app.require_subcommand(1);
  app.set_version_flag("--version", fmt::format("{} {}", g_program, KARMA_VERSION));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  return selected ? selected() : kExitUsage;
}

}  // namespace karma::tools
