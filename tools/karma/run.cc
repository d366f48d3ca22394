// `karma run [OPTIONS] -- COMMAND ARGS...`: starts COMMAND under libkarma.so (and, with --ranks, under mpirun with
// libkarma_mpi.so too), its options turned into KARMA_* variables and checked before anything starts.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "policy/plan_io.h"
#include "ground/common/env.h"
#include "ground/common/units.h"
#include "ground/trace/load.h"
#include "tools/karma-trace/commands.h"

extern char** environ;

namespace karma::tools {
namespace {

namespace fs = std::filesystem;

// Exit codes of the launcher itself, as env(1) has them; otherwise the command's own.
constexpr int kExitLauncher = 125;  // karma could not prepare the run (its library missing)
constexpr int kExitCannotRun = 126;
constexpr int kExitNotFound = 127;

struct RunArgs {
  std::string capacity, mode, trace_dir, log, residency;
  std::vector<std::string> sets;  // NAME=VALUE
  int ranks = 0;
  std::string mpirun = "mpirun";
  std::vector<std::string> mpi_args;
  bool summary = false;
  bool dry_run = false;
  std::vector<std::string> command;
  CLI::App* sub = nullptr;  // what it leaves unparsed is an option the command's, given without --
};

using Variables = std::vector<std::pair<std::string, std::string>>;

// What to start: the variables the command gets, the ones mpirun itself gets, and the argument vector.
struct Launch {
  Variables command_env;
  Variables launcher_env;  // with --ranks: what mpirun's own process gets (not LD_PRELOAD); else empty
  std::vector<std::string> argv;
  std::string trace_dir;
};

// libkarma.so or libkarma_mpi.so: in the lib/ of the tree this program runs from, installed or built.
Result<std::string> FindLibrary(const std::string& name) {
  std::error_code ec;
  const fs::path bin = fs::read_symlink("/proc/self/exe", ec).parent_path();
  std::vector<std::string> tried;
  for (const char* rel : {KARMA_REL_LIBDIR, "../lib"}) {
    const fs::path p = (bin / rel / name).lexically_normal();
    if (fs::is_regular_file(p, ec)) return p.string();
    if (std::find(tried.begin(), tried.end(), p.string()) == tried.end()) tried.push_back(p.string());
  }
  return NotFound(fmt::format("{} not found beside this program (looked for {})", name, fmt::join(tried, " and ")));
}

const EnvVarInfo* FindVariable(std::string_view name) {
  for (const EnvVarInfo& v : AllEnvVars()) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

Status SetVariable(const std::string& name, const std::string& value, Variables* vars) {
  const EnvVarInfo* info = FindVariable(name);
  if (info == nullptr) return InvalidArgument(name + " is no KARMA variable (`karma env` lists them)");
  if (Status st = ValidateEnvValue(*info, value); !st.ok()) return st;
  for (const auto& [n, v] : *vars) {
    if (n == name) return InvalidArgument(fmt::format("{} given twice ({} and {})", name, v, value));
  }
  vars->emplace_back(name, value);
  return Status::Ok();
}

// The KARMA_* variables the options give, checked against the table; the trace directory made absolute.
Result<Variables> OptionVariables(const RunArgs& a) {
  Variables vars;
  for (const std::string& s : a.sets) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos) return InvalidArgument("--set takes NAME=VALUE, not '" + s + "'");
    if (Status st = SetVariable(s.substr(0, eq), s.substr(eq + 1), &vars); !st.ok()) return st;
  }
  const std::pair<const char*, std::string> options[] = {
      {"KARMA_CAPACITY", a.capacity}, {"KARMA_MODE", a.mode}, {"KARMA_LOG", a.log}, {"KARMA_RESIDENCY", a.residency},
      {"KARMA_TRACE_DIR", a.trace_dir.empty() ? "" : fs::absolute(a.trace_dir).lexically_normal().string()}};
  for (const auto& [name, value] : options) {
    if (value.empty()) continue;
    if (Status st = SetVariable(name, value, &vars); !st.ok()) return st;
  }
  return vars;
}

// The KARMA_* variables the command inherits from this environment (those the options do not replace) must be
// valid too: libkarma.so would ignore them with a warning, which is not what the user asked for.
Status CheckInherited(const Variables& vars) {
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with("KARMA_")) continue;
    const size_t eq = entry.find('=');
    const std::string name(entry.substr(0, eq));
    if (std::any_of(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; })) continue;
    const EnvVarInfo* info = FindVariable(name);
    if (info == nullptr) {
      return InvalidArgument("the environment sets " + name + ", which is no KARMA variable (`karma env` lists them)");
    }
    if (Status st = ValidateEnvValue(*info, entry.substr(eq + 1)); !st.ok()) {
      return InvalidArgument("in the environment: " + st.message());
    }
  }
  return Status::Ok();
}

// LD_PRELOAD with `libs` after what is there already (a library already listed is not added twice).
Result<std::string> Preload(const std::vector<std::string>& libs) {
  const char* old = std::getenv("LD_PRELOAD");
  std::string out = old != nullptr ? old : "";
  for (const std::string& lib : libs) {
    bool listed = false;
    size_t start = 0;
    while (start <= out.size()) {
      const size_t end = std::min(out.find_first_of(": ", start), out.size());
      const std::string entry = out.substr(start, end - start);
      std::error_code ec;
      if (!entry.empty() && fs::path(entry).filename() == fs::path(lib).filename()) {
        if (!fs::equivalent(entry, lib, ec)) {
          return InvalidArgument(fmt::format("LD_PRELOAD already holds another {} ({}); unset it", 
                                             fs::path(lib).filename().string(), entry));
        }
        listed = true;
      }
      start = end + 1;
    }
    if (!listed) out += (out.empty() ? "" : ":") + lib;
  }
  return out;
}

// Everything that is checked before starting: the variables, the libraries, the command line for mpirun.
Result<Launch> Prepare(const RunArgs& a, const std::vector<std::string>& command, int* exit_code) {
  *exit_code = kExitUsage;
  if (command.empty()) return InvalidArgument("no command given: karma run [OPTIONS] -- COMMAND ARGS...");
  auto vars = OptionVariables(a);
  if (!vars.ok()) return vars.status();
  if (Status st = CheckInherited(*vars); !st.ok()) return st;
  *exit_code = kExitLauncher;
  std::vector<std::string> libs;
  for (const char* name : {"libkarma.so", "libkarma_mpi.so"}) {
    if (libs.size() == 1 && a.ranks == 0) break;
    auto lib = FindLibrary(name);
    if (!lib.ok()) return lib.status();
    libs.push_back(*lib);
  }
  *exit_code = kExitUsage;
  auto preload = Preload(libs);
  if (!preload.ok()) return preload.status();

  Launch l;
  // Where the command's libkarma.so writes: the option's directory, else the environment's, else the default.
  const char* inherited_dir = std::getenv("KARMA_TRACE_DIR");
  l.trace_dir = inherited_dir != nullptr ? inherited_dir : InfoOf(EnvVar::KARMA_TRACE_DIR).default_value;
  for (const auto& [name, value] : *vars) {
    if (name == "KARMA_TRACE_DIR") l.trace_dir = value;
  }
  if (a.ranks == 0) {
    l.command_env = *vars;
    l.command_env.emplace_back("LD_PRELOAD", *preload);
    l.argv = command;
    return l;
  }
  // mpirun passes to every rank what -x names (Open MPI); its own process gets the KARMA_* variables, not the
  // preloaded libraries.
  l.launcher_env = *vars;
  l.argv = {a.mpirun};
  l.argv.insert(l.argv.end(), a.mpi_args.begin(), a.mpi_args.end());
  l.argv.insert(l.argv.end(), {"-np", std::to_string(a.ranks), "-x", "LD_PRELOAD=" + *preload});
  std::vector<std::string> inherited;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.starts_with("KARMA_") || entry.starts_with("LD_LIBRARY_PATH=")) {
      const std::string name = entry.substr(0, entry.find('='));
      if (std::none_of(vars->begin(), vars->end(), [&](const auto& v) { return v.first == name; })) {
        inherited.push_back(name);
      }
    }
  }
  std::sort(inherited.begin(), inherited.end());
  for (const std::string& name : inherited) l.argv.insert(l.argv.end(), {"-x", name});
  for (const auto& [name, value] : *vars) l.argv.insert(l.argv.end(), {"-x", name + "=" + value});
  l.argv.insert(l.argv.end(), command.begin(), command.end());
  return l;
}

std::string Quoted(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%") ==
                        std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void PrintDryRun(const Launch& l) {
  for (const auto& [name, value] : l.launcher_env) fmt::print("{}={}\n", name, Quoted(value));
  for (const auto& [name, value] : l.command_env) fmt::print("{}={}\n", name, Quoted(value));
  std::string line;
  for (const std::string& arg : l.argv) line += (line.empty() ? "" : " ") + Quoted(arg);
  fmt::print("{}\n", line);
}

// Sets the variables and replaces this process with the command; returns only when that failed.
int Exec(const Launch& l) {
  for (const Variables* vars : {&l.launcher_env, &l.command_env}) {
    for (const auto& [name, value] : *vars) ::setenv(name.c_str(), value.c_str(), 1);
  }
  std::vector<char*> argv;
  for (const std::string& arg : l.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const int err = errno;
  fmt::print(stderr, "{}: cannot run {}: {}\n", ProgramName(), l.argv[0], std::strerror(err));
  return err == ENOENT ? kExitNotFound : kExitCannotRun;
}

pid_t g_child = 0;
void Forward(int sig) {
  if (g_child > 0) ::kill(g_child, sig);
}

// What this run recorded: `karma-trace summary` of the newest iteration, and the plan made for it.
void PrintRecorded(const std::string& dir, fs::file_time_type since) {
  std::vector<std::pair<fs::file_time_type, fs::path>> traces, plans;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const fs::file_time_type t = entry.last_write_time(ec);
    if (ec || t < since) continue;
    if (name.ends_with(".ktrace")) traces.emplace_back(t, entry.path());
    if (name.ends_with(".plan.json")) plans.emplace_back(t, entry.path());
  }
  std::sort(traces.begin(), traces.end());
  std::sort(plans.begin(), plans.end());
  if (traces.empty()) {
    fmt::print("\n{}: no iteration was recorded in {} during this run\n", ProgramName(), dir);
    return;
  }
  fmt::print("\n{}: {} iteration(s) recorded in {} during this run; the latest:\n", ProgramName(), traces.size(), dir);
  const std::string trace = traces.back().second.string();
  PrintSummary(trace, false);
  if (plans.empty()) {
    fmt::print("plan        none written during this run\n");
    return;
  }
  const std::string path = plans.back().second.string();
  auto plan = policy::ReadPlanFile(path);
  auto it = trace::LoadIteration(trace);
  if (!plan.ok() || !it.ok()) {
    fmt::print("plan        {}: {}\n", path, (!plan.ok() ? plan.status() : it.status()).message());
    return;
  }
  const policy::PlanCounts c = policy::CountActions(*plan, *it);
  fmt::print("plan        {}\n", path);
  fmt::print("            {} on {} for {}: {} swap-outs ({}), {} swap-ins ({}), {} discards, {} recomputes ({} ops), "
             "{} blocks\n",
             plan->strategy, plan->profile, FormatBytes(plan->capacity_bytes), c.swap_outs,
             FormatBytes(c.swap_out_bytes), c.swap_ins, FormatBytes(c.swap_in_bytes), c.discards, c.recomputes,
             c.recomputed_ops, plan->blocks.size());
  if (!plan->note.empty()) fmt::print("            {}\n", plan->note);
}

// Runs the command as a child, then prints what it recorded; the command's exit status becomes this process's.
int RunAndSummarize(const Launch& l) {
  const fs::file_time_type start = fs::file_time_type::clock::now();
  std::fflush(stdout);
  const pid_t child = ::fork();
  if (child < 0) {
    fmt::print(stderr, "{}: fork: {}\n", ProgramName(), std::strerror(errno));
    return kExitLauncher;
  }
  if (child == 0) ::_exit(Exec(l));
  g_child = child;
  // The terminal's interrupt reaches the command's process group anyway; other signals are passed on.
  struct sigaction forward {}, ignore {};
  forward.sa_handler = Forward;
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGTERM, &forward, nullptr);
  ::sigaction(SIGHUP, &forward, nullptr);
  ::sigaction(SIGINT, &ignore, nullptr);
  ::sigaction(SIGQUIT, &ignore, nullptr);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  ::fflush(stdout);
  ::dup2(STDERR_FILENO, STDOUT_FILENO);  // the summary goes where diagnostics go, after the command's output
  PrintRecorded(l.trace_dir, start);
  std::fflush(stdout);
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return 128 + sig;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : kExitLauncher;
}

int Run(const RunArgs& a) {
  for (const std::string& extra : a.sub->remaining()) {
    if (extra == "--") continue;
    fmt::print(stderr, "{}: error: '{}' is no option of karma run: put -- before the command "
               "(karma run [OPTIONS] -- COMMAND ARGS...)\n", ProgramName(), extra);
    return kExitUsage;
  }
  int code = kExitUsage;
  auto launch = Prepare(a, a.command, &code);
  if (!launch.ok()) {
    fmt::print(stderr, "{}: error: {}\n", ProgramName(), launch.status().message());
    return code;
  }
  if (a.dry_run) {
    PrintDryRun(*launch);
    return kExitOk;
  }
  return a.summary ? RunAndSummarize(*launch) : Exec(*launch);
}

}  // namespace

void RegisterRun(CLI::App& app, Action* selected) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* sub = AddCommand(
      app, "run",
      "Run COMMAND under KARMA: LD_PRELOAD gets this installation's libkarma.so (after what it holds), the options "
      "become KARMA_* variables, and the command replaces this process (its signals and exit code are its own). "
      "Every value is checked first: a bad one exits 2 with nothing started. Exit 125: libkarma.so was not found; "
      "126/127: COMMAND could not be run / was not found.",
      selected, [args] { return Run(*args); });
  args->sub = sub;
  sub->add_option("--capacity", args->capacity,
                  "KARMA_CAPACITY: device memory for tensors, bytes with a unit (12GiB) or a fraction of the free "
                  "memory (0.8)");
  sub->add_option("--mode", args->mode, "KARMA_MODE: auto, record, replay, um or off");
  sub->add_option("--trace-dir", args->trace_dir, "KARMA_TRACE_DIR: where recordings and plans go (made absolute)");
  sub->add_option("--log", args->log, "KARMA_LOG: error, warn, info or debug");
  sub->add_option("--residency", args->residency,
                  "KARMA_RESIDENCY: how the plan moves data, copy (CUDA's virtual memory API, copy engines), managed "
                  "or auto");
  sub->add_option("--set", args->sets, "any other KARMA_* variable, NAME=VALUE (repeatable; `karma env` lists them)")
      ->allow_extra_args(false);
  sub->add_option("--ranks", args->ranks,
                  "data parallel: start `mpirun -np N` with libkarma_mpi.so preloaded as well, the variables passed "
                  "to every rank with -x")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--mpirun", args->mpirun, "the MPI launcher for --ranks")->capture_default_str();
  sub->add_option("--mpi-arg", args->mpi_args,
                  "an argument for the MPI launcher, before -np (repeatable; --mpi-arg=--oversubscribe)")
      ->allow_extra_args(false);
  sub->add_flag("--summary", args->summary,
                "after the command exits, print (on stderr) what `karma summary` and the plan say about the "
                "iteration it recorded");
  sub->add_flag("--dry-run", args->dry_run, "print the variables and the command line instead of running them");
  sub->add_option("COMMAND", args->command, "the program to run and its arguments, after --");
  sub->prefix_command();
}

}  // namespace karma::tools
