// The subcommands of karma-trace: each file registers one or a few on the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "runtime/common/status.h"
#include "runtime/trace/model.h"

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

// Prints "karma-trace: error: ..." to stderr and returns kExitFailure.
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

}  // namespace karma::tools
