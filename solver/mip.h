// A mixed-integer linear program behind an RAII handle, solved with GLPK's branch and cut (glp_intopt).
#pragma once

#include <atomic>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ground/common/status.h"

namespace karma::solver {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// What a solve that runs long reports now and then (GLPK's search tree).
struct MipProgress {
  std::string name;
  double seconds = 0;
  int nodes = 0;          // subproblems created so far
  int active = 0;         // still open
  bool has_incumbent = false;
  double incumbent = 0;   // objective of the best integer solution
  double best_bound = 0;  // bound of the best open subproblem
  double gap = 0;         // relative gap between them (GLPK's glp_ios_mip_gap)
};
// GLPK keeps an environment per thread that outlives every problem; this frees the calling thread's (no GLPK
// problem of this thread may still exist). Threads that end before the process does call it after their solves.
void FreeThreadSolverMemory();

// The default reporter: one line on stderr.
void PrintProgress(const MipProgress& p);

struct MipOptions {
  double time_limit_s = 5;       // for the LP relaxation and the search together (wall clock); 0: no time at all
  double mip_gap = 1e-3;         // stop once the incumbent is this close (relative) to the best bound
  int lp_iteration_limit = 0;    // simplex iterations of the root LP relaxation; 0: unlimited
  double progress_after_s = 1;   // report progress once the solve has run this long, then every second
  std::function<void(const MipProgress&)> progress = PrintProgress;
  const std::atomic<bool>* cancel = nullptr;  // once true, no time is left: as at the time limit
};
inline bool Cancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

enum class MipOutcome {
  kOptimal,     // within the gap
  kFeasible,    // an integer solution, the search stopped early (time limit)
  kInfeasible,  // no integer solution exists (the LP relaxation or the search proved it)
  kNoSolution,  // the limit came before any integer solution
  kError,       // GLPK refused or failed (bounds, a numerical failure, an iteration limit)
};
const char* Name(MipOutcome o);

struct MipSolution {
  MipOutcome outcome = MipOutcome::kError;
  std::vector<double> x;      // column values, by column index (kOptimal and kFeasible only)
  double objective = 0;
  double best_bound = 0;      // what GLPK proved no solution beats (kOptimal, kFeasible)
  int nodes = 0;
  double seconds = 0;
  bool warm_start_accepted = false;
  std::string message;        // what happened, for every outcome but kOptimal
  bool has_solution() const { return outcome == MipOutcome::kOptimal || outcome == MipOutcome::kFeasible; }
};

// Minimization. Columns and rows are collected here; Solve hands them to a GLPK problem object that it owns
// for the duration of the solve (created and deleted by an RAII handle), so nothing leaks on any path.
class MipModel {
 public:
  enum class Kind { kContinuous, kBinary, kInteger };
  explicit MipModel(std::string name) : name_(std::move(name)) {}

  // Bounds may be infinite (kInf); a binary column is [0, 1]. Returns the column index (0-based). Bounds are
  // passed to GLPK as given: inconsistent ones are GLPK's error to report when solving.
  int AddColumn(const std::string& name, Kind kind, double lower, double upper, double cost);
  // lower <= sum(coefficient * column) <= upper; an infinite side is absent. Refuses unknown columns and
  // non-finite coefficients (GLPK would abort the process on the first and misbehave on the second).
  Status AddRow(const std::string& name, const std::vector<std::pair<int, double>>& terms, double lower,
                double upper);

  // A solution to offer the search as its first incumbent (GLPK's heuristic callback). It must satisfy every
  // bound and row (within `tolerance`): GLPK accepts whatever it is given, so Solve checks it first and drops
  // one that does not fit, saying why in the solution's message.
  void SetWarmStart(std::vector<double> x) { warm_ = std::move(x); }
  bool Satisfies(const std::vector<double>& x, double tolerance, std::string* why) const;
  double Objective(const std::vector<double>& x) const;  // sum of cost * value (x has one value per column)

  MipSolution Solve(const MipOptions& options) const;

  const std::string& name() const { return name_; }
  int columns() const { return static_cast<int>(cols_.size()); }
  int rows() const { return static_cast<int>(rows_.size()); }

 private:
  struct Column {
    std::string name;
    Kind kind;
    double lower, upper, cost;
  };
  struct Row {
    std::string name;
    std::vector<std::pair<int, double>> terms;
    double lower, upper;
  };
  std::string name_;
  std::vector<Column> cols_;
  std::vector<Row> rows_;
  std::vector<double> warm_;
};

}  // namespace karma::solver
