// The data-parallel pipeline over a simulated iteration: gradients out, exchange, host update, parameters in.
#include "policy/data_parallel.h"

#include <algorithm>
#include <map>
#include <set>

#include "ground/exchange/merge_plan.h"

namespace karma::policy {
namespace {

using Intervals = std::vector<std::pair<double, double>>;

// The earliest start at or after `from` of `seconds` of work on an engine busy during `busy` (sorted, disjoint):
// the work waits for a gap long enough, as a copy queued behind the plan's own would.
double EarliestGap(const Intervals& busy, double from, double seconds) {
  double t = from;
  for (const auto& [a, b] : busy) {
    if (b <= t) continue;
    if (a >= t + seconds) break;
    t = b;
  }
  return t;
}

// When each compute item of the simulation started and ended.
struct ItemTimes {
  std::vector<double> start, end;
};
ItemTimes TimesOf(const SimResult& sim) {
  ItemTimes t;
  t.start.assign(sim.sequence.size(), -1);
  t.end.assign(sim.sequence.size(), -1);
  for (const SimEvent& e : sim.events) {
    if (e.kind == SimEvent::kComputeStart) t.start[e.index] = e.t;
    if (e.kind == SimEvent::kComputeEnd) t.end[e.index] = e.t;
  }
  return t;
}

// Per gradient, the parameters the optimizer ops write from values derived from it (through temporaries and
// optimizer state such as momentum).
std::map<trace::BufferId, std::set<trace::BufferId>> ParamsOfGradients(const SimInput& in) {
  const trace::Iteration& it = *in.it;
  std::map<trace::BufferId, std::set<trace::BufferId>> derived;  // buffer -> gradients it derives from
  std::map<trace::BufferId, std::set<trace::BufferId>> params;
  for (const trace::Op& op : it.ops) {
    if (op.phase != trace::Phase::kOptimizer) continue;
    std::set<trace::BufferId> from;
    for (trace::BufferId b : in.access.ops[op.id].reads) {
      if (it.buffers[b].kind == trace::BufferKind::kGrad) from.insert(b);
      auto d = derived.find(b);
      if (d != derived.end()) from.insert(d->second.begin(), d->second.end());
    }
    if (from.empty()) continue;
    for (trace::BufferId w : in.access.ops[op.id].writes) {
      if (it.buffers[w].kind == trace::BufferKind::kParam) {
        for (trace::BufferId g : from) params[g].insert(w);
      } else if (it.buffers[w].kind != trace::BufferKind::kGrad) {
        derived[w].insert(from.begin(), from.end());
      }
    }
  }
  return params;
}

// The spans of one lane's work, one after another, each after its ready time and in a gap of `busy`.
struct LaneWork {
  double ready_s;
  double seconds;
  uint64_t bytes;
  int group;
};
std::vector<PipelineSpan> RunLane(const std::vector<LaneWork>& work, const Intervals& busy) {
  std::vector<PipelineSpan> spans;
  double free_at = 0;
  for (const LaneWork& w : work) {
    const double start = EarliestGap(busy, std::max(w.ready_s, free_at), w.seconds);
    spans.push_back({start, start + w.seconds, w.bytes, w.group});
    free_at = start + w.seconds;
  }
  return spans;
}

// How long a lane is busy from its first start to its last end: one iteration's work must fit in the period.
double Span(const std::vector<PipelineSpan>& spans) {
  return spans.empty() ? 0 : spans.back().end_s - spans.front().start_s;
}

}  // namespace

dp::CostModel DataParallelOptions::Allreduce() const {
  if (ranks <= 1 || network_bw <= 0) return {};
  const double n = ranks;
  return {alpha_s, 2 * (n - 1) / n / network_bw};
}

const char* Name(DataParallelOptions::Exchange e) {
  return e == DataParallelOptions::Exchange::kEnd ? "end" : "phased";
}

bool ParseExchange(const std::string& s, DataParallelOptions::Exchange* out) {
  if (s == "phased") *out = DataParallelOptions::Exchange::kPhased;
  else if (s == "end") *out = DataParallelOptions::Exchange::kEnd;
  else return false;
  return true;
}

double BusySeconds(const std::vector<PipelineSpan>& spans) {
  double t = 0;
  for (const PipelineSpan& s : spans) t += s.end_s - s.start_s;
  return t;
}

double DataParallelResult::ExchangeHidden() const {
  double hidden = 0;
  for (const PipelineSpan& s : exchange) hidden += std::max(0.0, std::min(s.end_s, device_s) - s.start_s);
  const double total = BusySeconds(exchange);
  return total > 0 ? hidden / total : 1.0;
}

namespace {

// What the pipeline needs of the simulated iteration.
struct Observed {
  double device_s = 0;              // the end of the last compute item but the optimizer's
  std::vector<double> ready;        // per buffer: when the backward pass last wrote it (gradients), else -1
  std::vector<double> first_read;   // per buffer: when an op of the iteration first read it, else -1
  Intervals h2d, d2h;               // the plan's own copies on the engines
};

Observed Observe(const SimInput& in, const Plan& plan, const SimResult& sim) {
  const trace::Iteration& it = *in.it;
  const ItemTimes times = TimesOf(sim);
  Observed o;
  o.ready.assign(it.buffers.size(), -1);
  o.first_read.assign(it.buffers.size(), -1);
  bool host_update = false;
  for (size_t i = 0; i < sim.sequence.size(); ++i) {
    const ComputeItem& item = sim.sequence[i];
    const trace::Op& op = it.ops[item.op];
    if (op.phase == trace::Phase::kOptimizer) {
      host_update = true;  // the host runs it
      continue;
    }
    o.device_s = std::max(o.device_s, times.end[i]);
    if (item.action != trace::kNone) continue;  // a recompute rewrites no gradient and reads parameters again
    for (trace::BufferId b : in.access.ops[op.id].reads) {
      if (o.first_read[b] < 0) o.first_read[b] = times.start[i];
    }
    if (op.phase != trace::Phase::kBackward) continue;
    for (trace::BufferId b : in.access.ops[op.id].writes) {
      if (it.buffers[b].kind == trace::BufferKind::kGrad) o.ready[b] = std::max(o.ready[b], times.end[i]);
    }
  }
  if (!host_update) o.device_s = sim.iteration_s;
  std::map<uint32_t, double> started;
  for (const SimEvent& e : sim.events) {
    if (e.kind == SimEvent::kCopyStart) started[e.index] = e.t;
    if (e.kind != SimEvent::kCopyEnd) continue;
    (plan.actions[e.index].kind == ActionKind::kSwapIn ? o.h2d : o.d2h).emplace_back(started[e.index], e.t);
  }
  std::sort(o.h2d.begin(), o.h2d.end());
  std::sort(o.d2h.begin(), o.d2h.end());
  return o;
}

// Per exchange group: the bytes and elements of the parameters it updates, and when the next iteration first
// reads one of them (-1: none is read).
struct GroupParams {
  std::vector<uint64_t> bytes, elements;
  std::vector<double> needed;
};
GroupParams ParamsByGroup(const SimInput& in, const Observed& o, const std::vector<int>& group_of, size_t groups) {
  const trace::Iteration& it = *in.it;
  // A parameter is updated once the last group holding one of its gradients is exchanged.
  std::vector<int> param_group(it.buffers.size(), -1);
  for (const auto& [g, params] : ParamsOfGradients(in)) {
    if (group_of[g] < 0) continue;
    for (trace::BufferId p : params) param_group[p] = std::max(param_group[p], group_of[g]);
  }
  GroupParams gp{std::vector<uint64_t>(groups, 0), std::vector<uint64_t>(groups, 0), std::vector<double>(groups, -1)};
  for (trace::BufferId p = 0; p < it.buffers.size(); ++p) {
    if (param_group[p] < 0) continue;
    const size_t k = static_cast<size_t>(param_group[p]);
    gp.bytes[k] += it.buffers[p].bytes;
    gp.elements[k] += it.buffers[p].Elements();
    const double f = o.first_read[p] >= 0 ? o.first_read[p] : o.device_s;
    gp.needed[k] = gp.needed[k] < 0 ? f : std::min(gp.needed[k], f);
  }
  return gp;
}

}  // namespace

DataParallelResult SimulateDataParallel(const SimInput& in, const Plan& plan, const SimResult& sim,
                                        const DataParallelOptions& options) {
  DataParallelResult r;
  if (!sim.feasible || sim.events.empty()) {
    r.reason = !sim.feasible ? "the iteration's plan is infeasible: " + sim.reason : "the simulation has no events";
    return r;
  }
  const trace::Iteration& it = *in.it;
  const Observed o = Observe(in, plan, sim);
  r.device_s = o.device_s;
  // Gradients in the order the backward pass finishes them.
  std::vector<trace::BufferId> grads;
  for (trace::BufferId b = 0; b < it.buffers.size(); ++b) {
    if (o.ready[b] >= 0) grads.push_back(b);
  }
  if (grads.empty()) {
    r.reason = "the backward pass writes no gradient buffer";
    return r;
  }
  std::stable_sort(grads.begin(), grads.end(),
                   [&](trace::BufferId a, trace::BufferId b) { return o.ready[a] < o.ready[b]; });

  // Stage 3: each gradient to the host as soon as it is final.
  std::vector<LaneWork> out_work;
  for (trace::BufferId g : grads) {
    const uint64_t bytes = it.buffers[g].bytes;
    r.gradient_bytes += bytes;
    out_work.push_back({o.ready[g], static_cast<double>(bytes) / in.hw.d2h_bw(), bytes, 0});
  }
  r.out = RunLane(out_work, o.d2h);

  // Stage 4: the exchange, in groups.
  std::vector<dp::PlanCall> calls;
  for (const PipelineSpan& s : r.out) calls.push_back({s.bytes, s.end_s, 0, false});
  const dp::CostModel cost = options.Allreduce();
  const std::vector<int> one_group{static_cast<int>(calls.size()) - 1};
  const std::vector<dp::GroupSpan> groups = options.exchange == DataParallelOptions::Exchange::kPhased
                                                ? dp::PlanGroups(calls, cost, options.max_group_bytes)
                                                : dp::ScheduleGroups(calls, one_group, cost);
  std::vector<int> group_of(it.buffers.size(), -1);  // per gradient
  for (size_t k = 0; k < groups.size(); ++k) {
    r.exchange.push_back({groups[k].start_s, groups[k].end_s, groups[k].bytes, static_cast<int>(k)});
    for (int i = groups[k].first; i <= groups[k].last; ++i) {
      group_of[grads[static_cast<size_t>(i)]] = static_cast<int>(k);
      r.out[static_cast<size_t>(i)].group = static_cast<int>(k);
    }
  }

  // Stage 5, then the parameters back to the device.
  const GroupParams gp = ParamsByGroup(in, o, group_of, groups.size());
  std::vector<LaneWork> update_work, in_work;
  for (size_t k = 0; k < groups.size(); ++k) {
    update_work.push_back({groups[k].end_s, static_cast<double>(gp.elements[k]) / options.update_params_per_s,
                           gp.bytes[k], static_cast<int>(k)});
  }
  r.update = RunLane(update_work, {});
  for (size_t k = 0; k < groups.size(); ++k) {
    in_work.push_back({r.update[k].end_s, static_cast<double>(gp.bytes[k]) / in.hw.h2d_bw(), gp.bytes[k],
                       static_cast<int>(k)});
  }
  r.in = RunLane(in_work, o.h2d);

  // The period: the device's work, every parameter back before its first read, and each lane's work within it.
  r.iteration_s = std::max({r.device_s, Span(r.out), Span(r.exchange), Span(r.update), Span(r.in)});
  for (size_t k = 0; k < groups.size(); ++k) {
    if (gp.needed[k] < 0 || gp.bytes[k] == 0) continue;
    const double t = r.in[k].end_s - gp.needed[k];
    if (t > r.iteration_s) {
      r.iteration_s = t;
      r.critical_group = static_cast<int>(k);
    }
  }
  r.feasible = true;
  return r;
}

}  // namespace karma::policy
