// karma-trace: inspect recorded iterations (.ktrace) and karma-graph files, and what KARMA plans for them.
// The same subcommands are `karma`'s (tools/karma), beside `karma run`.
#include "tools/karma-trace/commands.h"

int main(int argc, char** argv) {
  using namespace karma::tools;
  CLI::App app{"karma-trace: inspect a recorded training iteration (.ktrace) or a karma-graph JSON file,\n"
               "and the out-of-core plans KARMA makes for it. Every FILE may be either format.",
               "karma-trace"};
  Action selected;
  RegisterTraceCommands(app, &selected);
  return RunCli(app, selected, argc, argv);
}
