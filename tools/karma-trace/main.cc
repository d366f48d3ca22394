// karma-trace: inspect recorded iterations (.ktrace) and karma-graph files, and what KARMA plans for them.
#include <cstdio>

#include "tools/karma-trace/commands.h"

namespace karma::tools {

CLI::App* AddCommand(CLI::App& app, const std::string& name, const std::string& help, Action* selected,
                     Action action) {
  CLI::App* sub = app.add_subcommand(name, help);
  sub->callback([selected, action = std::move(action)] { *selected = action; });
  return sub;
}

int Fail(const Status& status) {
  std::fprintf(stderr, "karma-trace: error: %s\n", status.message().c_str());
  return kExitFailure;
}

}  // namespace karma::tools

int main(int argc, char** argv) {
  using namespace karma::tools;
  CLI::App app{"karma-trace: inspect a recorded training iteration (.ktrace) or a karma-graph JSON file,\n"
               "and the out-of-core plans KARMA makes for it. Every FILE may be either format.",
               "karma-trace"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "karma-trace 0.1.0");
  Action selected;
  RegisterSummary(app, &selected);
  RegisterTables(app, &selected);
  RegisterMemory(app, &selected);
  RegisterConvert(app, &selected);
  RegisterEnv(app, &selected);
  RegisterTop(app, &selected);
  RegisterSimulate(app, &selected);
  RegisterPlan(app, &selected);
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
