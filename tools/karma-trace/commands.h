// The subcommands of karma-trace: each file registers one or a few on the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "ground/common/status.h"
#include "ground/trace/model.h"

namespace karma::tools {

// Exit codes of every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and failed (bad file, infeasible request, I/O)
inline constexpr int kExitUsage = 2;    // the command line is wrong

// A subcommand's action; its return value is the process exit code.
using Action = std::function<int()>;
// Adds a subcommand whose action runs after parsing; `*selected` receives the action.
CLI::App* AddCommand(CLI::App& app, const std::string& name, const std::string& help, Action* selected,
                     Action action);

// The running program's name ("karma" or "karma-trace"), for messages.
const std::string& ProgramName();
// Prints "PROGRAM: error: ..." to stderr and returns kExitFailure.
int Fail(const Status& status);
// Loads a .ktrace or karma-graph JSON file, or prints why not.
bool LoadOrReport(const std::string& path, trace::Iteration* out);

void RegisterSummary(CLI::App& app, Action* selected);
void RegisterTables(CLI::App& app, Action* selected);   // ops, buffers
void RegisterMemory(CLI::App& app, Action* selected);
void RegisterConvert(CLI::App& app, Action* selected);  // import, export
void RegisterEnv(CLI::App& app, Action* selected);
void RegisterTop(CLI::App& app, Action* selected);
void RegisterSimulate(CLI::App& app, Action* selected);  // simulate, compare
void RegisterPlan(CLI::App& app, Action* selected);
// `karma run` (tools/karma), karma's only subcommand beyond karma-trace's.
void RegisterRun(CLI::App& app, Action* selected);
// Prints `summary`'s text (or JSON) for a .ktrace or karma-graph file; returns the exit code.
int PrintSummary(const std::string& file, bool json);
// All of the above but run: the subcommands karma-trace and karma share.
void RegisterTraceCommands(CLI::App& app, Action* selected);
// Parses the command line (the app named after the program) and runs the selected subcommand; returns the exit code.
int RunCli(CLI::App& app, const Action& selected, int argc, char** argv);

}  // namespace karma::tools
