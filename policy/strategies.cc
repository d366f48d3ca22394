// The strategy table, in-core, and evaluation by simulation.
#include "policy/strategies.h"

#include <fmt/format.h>

#include "policy/um.h"
#include "ground/common/units.h"
#include "ground/trace/analysis.h"

namespace karma::policy {
namespace {

constexpr StrategyInfo kStrategies[] = {
    {"incore", "everything on the device; infeasible above capacity (the ideal time)", true, false},
    {"um", "managed memory paged on demand (faults, LRU eviction), no plan", false, true},
    {"vdnn", "vDNN: offload layer inputs in forward, prefetch one layer ahead in backward, per-layer sync", true,
     false},
    {"superneurons", "SuperNeurons: recompute cheap layers, offload conv outputs (LRU), prefetch one layer ahead",
     true, false},
    {"checkpoint", "Chen et al. sqrt(N) checkpointing: keep segment boundaries, recompute segments", true, false},
    {"capacity", "capacity-based swapping: swap out only what cannot stay, prefetch FIFO as early as capacity allows",
     true, true},
    {"karma", "KARMA: blocks of layers, capacity-based swapping with interleaved recompute (best simulated)", true,
     true},
};

}  // namespace

std::span<const StrategyInfo> AllStrategies() { return kStrategies; }

std::string StrategyNames() {
  std::string s;
  for (const StrategyInfo& i : kStrategies) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}

bool IsStrategy(std::string_view name) {
  for (const StrategyInfo& i : kStrategies) {
    if (name == i.name) return true;
  }
  return false;
}

// In-core: the framework's own allocator with nothing moved; the iteration either fits or does not.
Result<Plan> PlanInCore(const SimInput& in) {
  const trace::MemoryCurve m = trace::IdealMemory(*in.it, trace::ComputeLifetimes(*in.it));
  if (m.peak_bytes > in.capacity) {
    return Infeasible(fmt::format("the iteration needs {} in core, more than the capacity {}",
                                  FormatBytes(m.peak_bytes), FormatBytes(in.capacity)));
  }
  Plan p;
  p.strategy = "incore";
  p.profile = ProfileLabel(in.hw);
  p.capacity_bytes = in.capacity;
  return p;
}

Result<Plan> MakePlan(std::string_view strategy, const SimInput& in) {
  Result<Plan> plan = InvalidArgument(fmt::format("unknown strategy '{}'; known: {}", strategy, StrategyNames()));
  if (strategy == "incore") plan = PlanInCore(in);
  else if (strategy == "um") return InvalidArgument("um pages on demand and has no plan");
  else if (strategy == "vdnn") plan = PlanVdnn(in);
  else if (strategy == "superneurons") plan = PlanSuperNeurons(in);
  else if (strategy == "checkpoint") plan = PlanCheckpoint(in);
  else if (strategy == "capacity") plan = PlanCapacity(in);
  else if (strategy == "karma") plan = PlanKarma(in);
  if (plan.ok()) plan->fingerprint = Fingerprint(*in.it, ProfileLabel(in.hw), in.capacity);
  return plan;
}

Evaluation Evaluate(std::string_view strategy, const SimInput& in, const SimOptions& options) {
  Evaluation e;
  e.strategy = std::string(strategy);
  if (strategy == "um") {
    e.sim = SimulateUnifiedMemory(in, options);
  } else {
    Result<Plan> plan = MakePlan(strategy, in);
    if (!plan.ok()) {
      e.reason = plan.status().message();
      return e;
    }
    e.plan = std::move(plan).value();
    e.sim = Simulate(in, e.plan, options);
  }
  e.feasible = e.sim.feasible;
  e.reason = e.sim.reason;
  return e;
}

bool Better(const SimResult& a, const SimResult& b) {
  if (a.feasible != b.feasible) return a.feasible;
  if (!a.feasible || a.iteration_s > b.iteration_s) return false;
  // Equally fast in simulation: the plan that moves less data leaves more room for what the model misses.
  return a.iteration_s < b.iteration_s || a.swap_in_bytes + a.swap_out_bytes < b.swap_in_bytes + b.swap_out_bytes;
}

bool KeepFaster(Candidate& best, Plan plan, const SimInput& in) {
  SimResult sim = Simulate(in, plan);
  if (!best.plan.strategy.empty() && !Better(sim, best.sim)) return false;
  best.plan = std::move(plan);
  best.sim = std::move(sim);
  return true;
}

}  // namespace karma::policy
