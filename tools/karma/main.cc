// karma: `karma run` starts a program under KARMA; the other subcommands are karma-trace's (inspecting recorded
// iterations and plans).
#include "tools/karma-trace/commands.h"

int main(int argc, char** argv) {
  using namespace karma::tools;
  CLI::App app{"karma: train beyond the GPU's memory. `karma run -- COMMAND` runs a program under KARMA; the other\n"
               "subcommands inspect a recorded iteration (.ktrace) or karma-graph file and the plans KARMA makes.",
               "karma"};
  Action selected;
  RegisterRun(app, &selected);
  RegisterTraceCommands(app, &selected);
  return RunCli(app, selected, argc, argv);
}
