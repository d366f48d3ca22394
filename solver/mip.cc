// The GLPK side of MipModel: building the problem object, the root LP, branch and cut, progress and warm start.
#include "solver/mip.h"

#include <fmt/format.h>
#include <glpk.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <memory>

namespace karma::solver {
namespace {

using Clock = std::chrono::steady_clock;

struct ProbDeleter {
  void operator()(glp_prob* p) const { glp_delete_prob(p); }
};
using ProbPtr = std::unique_ptr<glp_prob, ProbDeleter>;

// GLPK's bound type for [lower, upper] with absent (infinite) sides.
int BoundType(double lower, double upper) {
  const bool lo = std::isfinite(lower), up = std::isfinite(upper);
  if (lo && up) return lower == upper ? GLP_FX : GLP_DB;
  if (lo) return GLP_LO;
  if (up) return GLP_UP;
  return GLP_FR;
}
double Finite(double v) { return std::isfinite(v) ? v : 0.0; }

// What glp_simplex and glp_intopt return, in words.
std::string GlpkError(int code) {
  switch (code) {
    case GLP_EBADB: return "the initial basis is invalid (GLP_EBADB)";
    case GLP_ESING: return "the basis matrix is singular (GLP_ESING)";
    case GLP_ECOND: return "the basis matrix is ill-conditioned (GLP_ECOND)";
    case GLP_EBOUND: return "some double-bounded variables have incorrect bounds (GLP_EBOUND)";
    case GLP_EFAIL: return "the solver failed (GLP_EFAIL)";
    case GLP_EOBJLL: return "the objective fell below its limit (GLP_EOBJLL)";
    case GLP_EOBJUL: return "the objective rose above its limit (GLP_EOBJUL)";
    case GLP_EITLIM: return "the simplex iteration limit was reached (GLP_EITLIM)";
    case GLP_ETMLIM: return "the time limit was reached (GLP_ETMLIM)";
    case GLP_ENOPFS: return "there is no primal feasible solution (GLP_ENOPFS)";
    case GLP_ENODFS: return "there is no dual feasible solution: the problem is unbounded (GLP_ENODFS)";
    case GLP_EROOT: return "no optimal basis of the root LP relaxation (GLP_EROOT)";
    case GLP_ESTOP: return "the search was stopped (GLP_ESTOP)";
    case GLP_EMIPGAP: return "the relative MIP gap tolerance was reached (GLP_EMIPGAP)";
    default: return fmt::format("GLPK error code {}", code);
  }
}

struct SearchContext {
  const MipModel* model;
  const MipOptions* options;
  Clock::time_point start;
  double last_report = -1;
  const std::vector<double>* warm = nullptr;  // offered once, at the first heuristic call
  bool warm_offered = false, warm_accepted = false;
  int nodes = 0;
  double best_bound = NAN;
};

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void Callback(glp_tree* tree, void* info) {
  auto* ctx = static_cast<SearchContext*>(info);
  if (Cancelled(ctx->options->cancel)) {
    glp_ios_terminate(tree);
    return;
  }
  int active = 0, nodes = 0, total = 0;
  glp_ios_tree_size(tree, &active, &nodes, &total);
  ctx->nodes = total;
  if (const int best = glp_ios_best_node(tree); best != 0) ctx->best_bound = glp_ios_node_bound(tree, best);
  if (glp_ios_reason(tree) == GLP_IHEUR && ctx->warm != nullptr && !ctx->warm_offered) {
    ctx->warm_offered = true;
    std::vector<double> x(ctx->warm->size() + 1, 0.0);  // GLPK counts from 1
    std::copy(ctx->warm->begin(), ctx->warm->end(), x.begin() + 1);
    ctx->warm_accepted = glp_ios_heur_sol(tree, x.data()) == 0;
  }
  const double t = Since(ctx->start);
  const MipOptions& opt = *ctx->options;
  if (!opt.progress || t < opt.progress_after_s || (ctx->last_report >= 0 && t - ctx->last_report < 1.0)) return;
  ctx->last_report = t;
  MipProgress p;
  p.name = ctx->model->name();
  p.seconds = t;
  p.nodes = total;
  p.active = active;
  glp_prob* prob = glp_ios_get_prob(tree);
  p.has_incumbent = glp_mip_status(prob) == GLP_FEAS || glp_mip_status(prob) == GLP_OPT;
  p.incumbent = p.has_incumbent ? glp_mip_obj_val(prob) : 0;
  p.best_bound = ctx->best_bound;
  p.gap = p.has_incumbent ? glp_ios_mip_gap(tree) : INFINITY;
  opt.progress(p);
}

// Milliseconds left of the limit, as GLPK's tm_lim wants them.
int MillisLeft(const MipOptions& opt, Clock::time_point start) {
  if (Cancelled(opt.cancel)) return 0;
  const double left = opt.time_limit_s - Since(start);
  if (left <= 0) return 0;
  return static_cast<int>(std::min(left * 1e3, static_cast<double>(INT_MAX - 1)));
}

}  // namespace

void FreeThreadSolverMemory() { glp_free_env(); }

void PrintProgress(const MipProgress& p) {
  std::string incumbent = p.has_incumbent ? fmt::format("{:.6g}", p.incumbent) : "none";
  std::string gap = p.has_incumbent ? fmt::format(", gap {:.2f}%", 100 * p.gap) : "";
  std::fprintf(stderr, "karma: glpk %s: %.1f s, %d nodes (%d open), incumbent %s, best bound %.6g%s\n",
               p.name.c_str(), p.seconds, p.nodes, p.active, incumbent.c_str(), p.best_bound, gap.c_str());
}

const char* Name(MipOutcome o) {
  switch (o) {
    case MipOutcome::kOptimal: return "optimal";
    case MipOutcome::kFeasible: return "feasible";
    case MipOutcome::kInfeasible: return "infeasible";
    case MipOutcome::kNoSolution: return "no solution";
    case MipOutcome::kError: return "error";
  }
  return "?";
}

int MipModel::AddColumn(const std::string& name, Kind kind, double lower, double upper, double cost) {
  if (kind == Kind::kBinary) {
    lower = std::max(lower, 0.0);
    upper = std::min(upper, 1.0);
  }
  cols_.push_back({name, kind, lower, upper, cost});
  return static_cast<int>(cols_.size()) - 1;
}

Status MipModel::AddRow(const std::string& name, const std::vector<std::pair<int, double>>& terms, double lower,
                        double upper) {
  Row row{name, {}, lower, upper};
  if (std::isnan(lower) || std::isnan(upper)) return InvalidArgument(fmt::format("{}: row {} has a NaN bound", name_, name));
  for (const auto& [col, coef] : terms) {
    if (col < 0 || col >= columns()) {
      return InvalidArgument(fmt::format("{}: row {} names column {} of {}", name_, name, col, columns()));
    }
    if (!std::isfinite(coef)) {
      return InvalidArgument(fmt::format("{}: row {} gives column {} ({}) the coefficient {}", name_, name, col,
                                         cols_[static_cast<size_t>(col)].name, coef));
    }
    if (coef == 0) continue;
    // GLPK refuses a column twice in one row: merge.
    auto same = std::find_if(row.terms.begin(), row.terms.end(), [&](const auto& t) { return t.first == col; });
    if (same != row.terms.end()) same->second += coef;
    else row.terms.emplace_back(col, coef);
  }
  rows_.push_back(std::move(row));
  return Status::Ok();
}

bool MipModel::Satisfies(const std::vector<double>& x, double tolerance, std::string* why) const {
  auto fail = [&](std::string m) {
    if (why != nullptr) *why = std::move(m);
    return false;
  };
  if (x.size() != cols_.size()) return fail(fmt::format("{} values for {} columns", x.size(), cols_.size()));
  auto slack = [&](double bound) { return tolerance * std::max(1.0, std::fabs(bound)); };
  for (size_t j = 0; j < cols_.size(); ++j) {
    const Column& c = cols_[j];
    if (!std::isfinite(x[j]) || x[j] < c.lower - slack(c.lower) || x[j] > c.upper + slack(c.upper)) {
      return fail(fmt::format("column {} = {} is outside [{}, {}]", c.name, x[j], c.lower, c.upper));
    }
    if (c.kind != Kind::kContinuous && std::fabs(x[j] - std::round(x[j])) > tolerance) {
      return fail(fmt::format("column {} = {} is not integer", c.name, x[j]));
    }
  }
  for (const Row& r : rows_) {
    double activity = 0;
    for (const auto& [col, coef] : r.terms) activity += coef * x[static_cast<size_t>(col)];
    if (activity < r.lower - slack(r.lower) || activity > r.upper + slack(r.upper)) {
      return fail(fmt::format("row {} = {} is outside [{}, {}]", r.name, activity, r.lower, r.upper));
    }
  }
  return true;
}

double MipModel::Objective(const std::vector<double>& x) const {
  double sum = 0;
  for (size_t j = 0; j < cols_.size() && j < x.size(); ++j) sum += cols_[j].cost * x[j];
  return sum;
}

MipSolution MipModel::Solve(const MipOptions& options) const {
  MipSolution sol;
  const Clock::time_point start = Clock::now();
  auto finish = [&](MipOutcome o, std::string message) {
    sol.outcome = o;
    sol.message = std::move(message);
    sol.seconds = Since(start);
    return sol;
  };
  if (rows_.empty()) {
    // Nothing couples the columns (GLPK refuses a problem without rows): each sits at its cheaper bound.
    sol.x.resize(cols_.size());
    for (size_t j = 0; j < cols_.size(); ++j) {
      const Column& c = cols_[j];
      const double v = c.cost >= 0 ? c.lower : c.upper;
      if (!std::isfinite(v) && c.cost != 0) return finish(MipOutcome::kError, "the objective is unbounded");
      sol.x[j] = std::isfinite(v) ? v : (std::isfinite(c.lower) ? c.lower : std::isfinite(c.upper) ? c.upper : 0.0);
      if (c.kind != Kind::kContinuous) sol.x[j] = std::ceil(sol.x[j] - 1e-9);
      sol.objective += c.cost * sol.x[j];
    }
    sol.best_bound = sol.objective;
    return finish(MipOutcome::kOptimal, "");
  }
  glp_term_out(GLP_OFF);
  ProbPtr prob(glp_create_prob());
  glp_prob* lp = prob.get();
  glp_set_obj_dir(lp, GLP_MIN);
  glp_add_cols(lp, columns());
  for (int j = 0; j < columns(); ++j) {
    const Column& c = cols_[static_cast<size_t>(j)];
    glp_set_col_kind(lp, j + 1, c.kind == Kind::kContinuous ? GLP_CV : GLP_IV);
    glp_set_col_bnds(lp, j + 1, BoundType(c.lower, c.upper), Finite(c.lower), Finite(c.upper));
    glp_set_obj_coef(lp, j + 1, c.cost);
  }
  if (!rows_.empty()) glp_add_rows(lp, rows());
  std::vector<int> ind;
  std::vector<double> val;
  for (int i = 0; i < rows(); ++i) {
    const Row& r = rows_[static_cast<size_t>(i)];
    glp_set_row_bnds(lp, i + 1, BoundType(r.lower, r.upper), Finite(r.lower), Finite(r.upper));
    ind.assign(1, 0);
    val.assign(1, 0.0);
    for (const auto& [col, coef] : r.terms) {
      ind.push_back(col + 1);
      val.push_back(coef);
    }
    glp_set_mat_row(lp, i + 1, static_cast<int>(r.terms.size()), ind.data(), val.data());
  }

  // The root LP relaxation first, with its own limits; branch and cut starts from its basis. The rows mix
  // bytes and seconds: GLPK scales them first.
  glp_scale_prob(lp, GLP_SF_AUTO);
  glp_smcp smcp;
  glp_init_smcp(&smcp);
  smcp.msg_lev = GLP_MSG_OFF;
  smcp.tm_lim = MillisLeft(options, start);
  if (options.lp_iteration_limit > 0) smcp.it_lim = options.lp_iteration_limit;
  if (smcp.tm_lim == 0) return finish(MipOutcome::kNoSolution, "the time limit came before the LP relaxation");
  if (const int rc = glp_simplex(lp, &smcp); rc != 0) {
    if (rc == GLP_ETMLIM) return finish(MipOutcome::kNoSolution, "the time limit came during the LP relaxation");
    return finish(MipOutcome::kError, "LP relaxation: " + GlpkError(rc));
  }
  switch (glp_get_status(lp)) {
    case GLP_OPT: break;
    case GLP_NOFEAS: return finish(MipOutcome::kInfeasible, "the LP relaxation has no feasible solution");
    case GLP_UNBND: return finish(MipOutcome::kError, "the LP relaxation is unbounded");
    default: return finish(MipOutcome::kError, "the LP relaxation ended without an optimal basis");
  }

  SearchContext ctx{this, &options, start};
  std::string warm_note;
  if (!warm_.empty()) {
    if (Satisfies(warm_, 1e-7, &warm_note)) ctx.warm = &warm_;
    else warm_note = "the warm start was dropped: " + warm_note;
  }
  glp_iocp iocp;
  glp_init_iocp(&iocp);
  iocp.msg_lev = GLP_MSG_OFF;
  iocp.presolve = GLP_OFF;
  iocp.mip_gap = options.mip_gap;
  iocp.tm_lim = MillisLeft(options, start);
  iocp.cb_func = Callback;
  iocp.cb_info = &ctx;
  const int rc = glp_intopt(lp, &iocp);
  sol.nodes = ctx.nodes;
  sol.warm_start_accepted = ctx.warm_accepted;
  const int status = glp_mip_status(lp);
  const bool found = status == GLP_OPT || status == GLP_FEAS;
  if (found) {
    sol.x.resize(cols_.size());
    for (int j = 0; j < columns(); ++j) sol.x[static_cast<size_t>(j)] = glp_mip_col_val(lp, j + 1);
    sol.objective = glp_mip_obj_val(lp);
    sol.best_bound = std::isnan(ctx.best_bound) ? sol.objective : std::min(ctx.best_bound, sol.objective);
  }
  auto with_note = [&](std::string m) { return warm_note.empty() ? m : m + "; " + warm_note; };
  if ((rc == 0 || rc == GLP_EMIPGAP) && found) {
    if (rc == 0 && status == GLP_OPT) sol.best_bound = sol.objective;
    return finish(MipOutcome::kOptimal, warm_note);
  }
  if ((rc == 0 && status == GLP_NOFEAS) || rc == GLP_ENOPFS) {
    return finish(MipOutcome::kInfeasible, with_note("no integer solution satisfies the constraints"));
  }
  if (rc == GLP_ETMLIM || rc == GLP_ESTOP) {
    if (found) return finish(MipOutcome::kFeasible, with_note("stopped by the time limit with an integer solution"));
    return finish(MipOutcome::kNoSolution, with_note(fmt::format("no integer solution within the time limit ({} s)",
                                                                 options.time_limit_s)));
  }
  return finish(MipOutcome::kError, with_note(GlpkError(rc)));
}

}  // namespace karma::solver
