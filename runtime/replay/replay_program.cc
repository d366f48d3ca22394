// Compiling a plan into per-position issue lists for the executor.
#include "runtime/replay/replay_program.h"

#include <fmt/format.h>

#include <algorithm>

#include "policy/access.h"
#include "policy/plan_builder.h"
#include "policy/simulator.h"
#include "ground/common/units.h"
#include "runtime/plan/planning.h"

namespace karma::rt {
namespace {

bool Contains(const std::vector<trace::BufferId>& v, trace::BufferId b) {
  return std::find(v.begin(), v.end(), b) != v.end();
}

void AddUnique(std::vector<trace::BufferId>& v, trace::BufferId b) {
  if (!Contains(v, b)) v.push_back(b);
}

// Whether an op after `after`, or another recompute's op, reads `b` before recompute `rebuild` runs.
bool ReadBefore(const policy::AccessModel& acc, const ReplayProgram& prog, trace::BufferId b, int32_t after,
                uint32_t rebuild) {
  const uint32_t at = prog.recomputes[rebuild].before;
  for (auto k = static_cast<uint32_t>(after + 1); k < at; ++k) {
    if (Contains(acc.ops[k].reads, b)) return true;
  }
  for (uint32_t r = 0; r < prog.recomputes.size(); ++r) {
    const ReplayProgram::Recompute& rc = prog.recomputes[r];
    // Recomputes run right before their op, in plan order: those before `at`, or before it at `at`.
    if (r == rebuild || static_cast<int64_t>(rc.before) <= after || rc.before > at || (rc.before == at && r > rebuild)) {
      continue;
    }
    for (trace::OpId op : rc.ops) {
      if (Contains(acc.ops[op].reads, b)) return true;
    }
  }
  return false;
}

// Per action, for swap-ins: the position before which the simulated plan had started it (entry k of `after` goes
// out before op k). A swap-in waits in the simulation until the device has room for it; issued at its `after`
// instead, a fetch would take memory the plan still counts as someone else's. 0 where the simulation does not say.
std::vector<uint32_t> SimulatedSwapInStarts(const policy::SimInput& in, const policy::Plan& plan) {
  std::vector<uint32_t> from(plan.actions.size(), 0);
  const policy::SimResult r = policy::Simulate(in, plan, {.record_events = true});
  if (!r.feasible) return from;
  std::vector<uint32_t> started;  // swap-ins started since the last compute item began
  for (const policy::SimEvent& e : r.events) {
    if (e.kind == policy::SimEvent::kCopyStart && plan.actions[e.index].kind == policy::ActionKind::kSwapIn) {
      started.push_back(e.index);
    } else if (e.kind == policy::SimEvent::kComputeStart && !started.empty()) {
      // They go out before the op this item belongs to: a recompute's op runs right before its action's `before`.
      const policy::ComputeItem& item = r.sequence[e.index];
      const uint32_t pos = item.action == trace::kNone ? item.op : plan.actions[item.action].before;
      for (uint32_t a : started) from[a] = pos;
      started.clear();
    }
  }
  for (uint32_t a : started) from[a] = static_cast<uint32_t>(in.it->ops.size());
  return from;
}

// The drops the plan implies without an action: policy::StaticMemory frees a value at its last use when its next use
// overwrites it. After an op of the iteration, where a recompute writes the value next: a discard that recompute
// rebuilds (as for the plan's own discards); after a recompute's launches: ReplayProgram::Recompute::dropped. The
// recompute that writes such a value next gets it as a target. Left alone: values the plan moves itself before
// their next use, memory the application keeps, and those it has freed by then (`freed_before`, per buffer: a
// recompute writes them into its scratch memory). Returns the number of discards added.
size_t AddImpliedDrops(const policy::SimInput& in, const policy::Plan& plan, const std::vector<policy::ComputeItem>& seq,
                       const std::vector<uint32_t>& recompute_of_action, const std::vector<uint32_t>& freed_before,
                       ReplayProgram& prog) {
  const policy::SequenceUses uses(in, seq);
  // The iteration's op a compute item runs at or right before.
  auto position = [&](const policy::ComputeItem& item) {
    return item.action == trace::kNone ? item.op : plan.actions[item.action].before;
  };
  size_t discards = 0;
  for (size_t id = 0; id < prog.buffers.size(); ++id) {
    const auto b = static_cast<trace::BufferId>(id);
    if (in.access.persistent[b] || !prog.buffers[b].exact) continue;
    const std::span<const policy::BufferUse> u = uses.of(b);
    for (size_t i = 0; i + 1 < u.size(); ++i) {
      if (!u[i + 1].pure_write) continue;
      const policy::ComputeItem& last = seq[u[i].item];
      const policy::ComputeItem& next = seq[u[i + 1].item];
      const uint32_t at = position(last), next_at = position(next);
      if ((last.action != trace::kNone && last.action == next.action) || freed_before[b] <= at) continue;
      // An action of the plan on b from after its last use to before its next: the plan moves it itself.
      const bool moved = std::any_of(plan.actions.begin(), plan.actions.end(), [&](const policy::Action& a) {
        return a.kind != policy::ActionKind::kRecompute && a.buffer == b && a.after >= static_cast<int32_t>(at) &&
               a.after < static_cast<int32_t>(next_at);
      });
      if (moved) continue;
      const uint32_t rebuilt_by = next.action == trace::kNone || freed_before[b] <= next_at
                                      ? trace::kNone
                                      : recompute_of_action[next.action];
      if (last.action != trace::kNone) {
        prog.recomputes[recompute_of_action[last.action]].dropped.push_back({b, rebuilt_by});
      } else if (rebuilt_by != trace::kNone) {
        prog.after[at + 1].push_back({ReplayProgram::Move::kDiscard, b, UINT32_MAX, rebuilt_by});
        discards++;
      } else {
        continue;  // the application writes it afresh: its own business
      }
      if (rebuilt_by != trace::kNone) AddUnique(prog.recomputes[rebuilt_by].targets, b);
    }
  }
  return discards;
}

}  // namespace

Result<std::shared_ptr<const ReplayProgram>> CompileProgram(const RecordedIteration& rec, const policy::Plan& plan,
                                                            const policy::HwProfile& planned_with) {
  const trace::Iteration& it = rec.it;
  KARMA_RETURN_IF_ERROR(policy::CheckPlanShape(plan, it));
  if (rec.ops.size() != it.ops.size() || rec.buffers.size() != it.buffers.size()) {
    return Internal("the recorded iteration and its executor view disagree");
  }
  auto prog = std::make_shared<ReplayProgram>();
  const auto n = static_cast<uint32_t>(it.ops.size());
  prog->period = n;
  prog->buffers = rec.buffers;
  std::vector<bool> homed(rec.buffers.size(), false);
  for (trace::BufferId b : plan.host_resident) {
    if (b < homed.size()) homed[b] = true;
  }
  prog->brought_back.assign(rec.buffers.size(), false);
  for (const policy::Action& a : plan.actions) {
    if (a.kind == policy::ActionKind::kSwapIn && a.buffer < homed.size() && homed[a.buffer]) {
      prog->brought_back[a.buffer] = true;
    }
  }
  prog->after.resize(n + 1);
  prog->waits.resize(n);
  prog->recompute_before.resize(n);
  prog->reads.resize(n);
  prog->in_recompute.assign(n, false);
  prog->actions = plan.actions.size();
  const policy::AccessModel acc = policy::BuildAccessModel(it);
  for (uint32_t p = 0; p < n; ++p) {
    prog->shape.push_back(rec.ops[p].shape);
    prog->stream.push_back(rec.ops[p].stream_key);
    prog->relaunch.push_back(rec.ops[p].relaunch);
    prog->reads[p] = acc.ops[p].reads;
    std::vector<trace::BufferId> uses = acc.ops[p].reads;
    for (trace::BufferId b : acc.ops[p].writes) AddUnique(uses, b);
    prog->uses.push_back(std::move(uses));
  }
  prog->alloc_size.assign(rec.allocations, 0);
  for (const ReplayBuffer& rb : rec.buffers) {
    if (rb.allocated_inside && rb.alloc_ordinal < rec.allocations) prog->alloc_size[rb.alloc_ordinal] = rb.bytes;
  }

  // Recomputes first: discards refer to the one that rebuilds their buffer.
  std::vector<uint32_t> recompute_of_action(plan.actions.size(), UINT32_MAX);
  for (uint32_t a = 0; a < plan.actions.size(); ++a) {
    const policy::Action& act = plan.actions[a];
    if (act.kind != policy::ActionKind::kRecompute) continue;
    ReplayProgram::Recompute r;
    r.action = a;
    r.before = act.before;
    r.ops = act.ops;
    r.scratch = act.scratch;
    for (trace::OpId op : act.ops) {
      if (!rec.ops[op].relaunch) {
        return Unsupported(fmt::format("recompute action {}: op {} ({}) cannot be launched again", a, op,
                                       it.ops[op].name));
      }
      for (trace::BufferId b : acc.ops[op].writes) {
        if (!rec.buffers[b].exact) {
          return Unsupported(fmt::format("recompute action {}: op {} ({}) writes buffer {}, which is not one "
                                         "tensor allocated and freed inside the iteration", a, op, it.ops[op].name, b));
        }
        if (!Contains(r.scratch, b)) AddUnique(r.written, b);
      }
      for (const auto* list : {&acc.ops[op].reads, &acc.ops[op].writes}) {
        for (trace::BufferId b : *list) {
          if (!Contains(r.scratch, b)) AddUnique(r.used, b);
        }
      }
    }
    for (trace::OpId op : act.ops) prog->in_recompute[op] = true;
    recompute_of_action[a] = static_cast<uint32_t>(prog->recomputes.size());
    prog->recompute_before[act.before].push_back(static_cast<uint32_t>(prog->recomputes.size()));
    prog->recomputes.push_back(std::move(r));
  }

  // Per buffer: the last position whose op uses it.
  std::vector<uint32_t> last_use(it.buffers.size(), trace::kNone);
  for (uint32_t p = 0; p < n; ++p) {
    for (trace::BufferId b : prog->uses[p]) last_use[b] = p;
  }
  // Per buffer: the op the application frees it before (kNone: not inside the iteration).
  std::vector<uint32_t> freed_before(it.buffers.size(), trace::kNone);
  for (const trace::Event& e : it.events) {
    if (e.kind == trace::EventKind::kFreeRequested && e.buffer < it.buffers.size()) freed_before[e.buffer] = e.before_op;
  }
  // When the application frees what the plan counts as freed after its last use.
  {
    // Entry k of `after` goes out before op k, after the frees made since op k - 1.
    prog->room_from.resize(n + 1);
    for (size_t b = 0; b < it.buffers.size(); ++b) {
      if (!rec.buffers[b].allocated_inside || last_use[b] == trace::kNone || freed_before[b] == trace::kNone) continue;
      for (uint32_t k = last_use[b] + 1; k < freed_before[b] && k <= n; ++k) {
        prog->room_from[k].push_back(static_cast<trace::BufferId>(b));
      }
    }
  }
  size_t prefetches = 0, evictions = 0, discards = 0, dropped = 0;
  uint64_t evicted_bytes = 0;  // what the evictions move to the host
  // The iteration as the plan was made for it, simulated with the plan's profile: for when swap-ins start and for
  // the memory the plan holds at each op.
  const trace::Iteration planning = PlanningIteration(it, planned_with);
  const policy::SimInput in = policy::MakeSimInput(planning, planned_with, plan.capacity_bytes);
  // On the copy path a fetch takes device memory when it is issued; managed memory's prefetch makes the driver
  // evict what it needs, and goes out at `after` as planned.
  const std::vector<uint32_t> swap_in_from = planned_with.moves == policy::MovePath::kCopy
                                                 ? SimulatedSwapInStarts(in, plan)
                                                 : std::vector<uint32_t>(plan.actions.size(), 0);
  for (uint32_t a = 0; a < plan.actions.size(); ++a) {
    const policy::Action& act = plan.actions[a];
    size_t entry = static_cast<size_t>(act.after + 1);
    // A swap-in no earlier than the simulation started it, and before the op that waits for it.
    if (act.kind == policy::ActionKind::kSwapIn) entry = std::min<size_t>(std::max<size_t>(entry, swap_in_from[a]), act.before);
    auto& at = prog->after[entry];
    switch (act.kind) {
      case policy::ActionKind::kSwapOut:
        if (!act.keep) {
          at.push_back({ReplayProgram::Move::kEvict, act.buffer, a, UINT32_MAX});
          evictions++;
          evicted_bytes += rec.buffers[act.buffer].bytes;
        }
        break;
      case policy::ActionKind::kSwapIn:
        at.push_back({ReplayProgram::Move::kPrefetch, act.buffer, a, UINT32_MAX, act.before});
        prog->waits[act.before].push_back(a);
        prefetches++;
        break;
      case policy::ActionKind::kDiscard: {
        // The first recompute after the discard that writes the buffer rebuilds it.
        uint32_t rebuild = UINT32_MAX;
        for (uint32_t r = 0; r < prog->recomputes.size(); ++r) {
          const ReplayProgram::Recompute& rc = prog->recomputes[r];
          if (static_cast<int64_t>(rc.before) <= act.after || !Contains(rc.written, act.buffer)) continue;
          if (rebuild == UINT32_MAX || rc.before < prog->recomputes[rebuild].before) rebuild = r;
        }
        // Read before that recompute rebuilds it (the plan brings the host's value back for such a read): the
        // host's copy is the one managed memory has, so it must be evicted, not discarded.
        if (rebuild != UINT32_MAX && ReadBefore(acc, *prog, act.buffer, act.after, rebuild)) rebuild = UINT32_MAX;
        const ReplayBuffer& rb = rec.buffers[act.buffer];
        if (rebuild != UINT32_MAX && rb.exact) {
          at.push_back({ReplayProgram::Move::kDiscard, act.buffer, a, rebuild});
          AddUnique(prog->recomputes[rebuild].targets, act.buffer);
          discards++;
        } else if (policy::ValueReadFrom(acc, act.buffer, static_cast<uint32_t>(act.after + 1)) || !rb.exact) {
          // Needed again, or in memory the application keeps (the planner keeps those values live; a plan file
          // from elsewhere might not): evicted with its bytes.
          at.push_back({ReplayProgram::Move::kEvict, act.buffer, a, UINT32_MAX});
          evictions++;
          evicted_bytes += rb.bytes;
        } else {
          dropped++;  // dead, and freed by the application: the free discards it
        }
        break;
      }
      case policy::ActionKind::kRecompute:
        break;
    }
  }
  const std::vector<policy::ComputeItem> seq = policy::ComputeSequence(plan, n);
  discards += AddImpliedDrops(in, plan, seq, recompute_of_action, freed_before, *prog);
  {
    const std::vector<uint64_t> mem = policy::StaticMemory(in, plan);
    const std::vector<uint32_t> at = policy::OpPositions(seq, n);
    // The recomputes that run right before an op hold their inputs and outputs there too.
    for (uint32_t p = 0; p < n; ++p) {
      uint64_t most = 0;
      for (uint32_t i = p == 0 ? 0 : at[p - 1] + 1; i <= at[p] && i < mem.size(); ++i) most = std::max(most, mem[i]);
      prog->planned_bytes.push_back(most);
    }
  }
  // Evictions that read duplication could spare (counted for the log, not acted on): a plan swap-in of a buffer in
  // memory the application keeps, then that buffer's next move an eviction, with nothing writing it in between
  // (entry k's moves go out before op k, after the recomputes before it; a touch counts as a write). Marked
  // read-mostly before it comes back, the host's copy would stay current and the device's could leave without a
  // write-back (tests/gpu/um_costs.cu measures whether it can on a GPU).
  {
    std::vector<bool> back(it.buffers.size(), false);  // swapped in, not written since
    for (uint32_t k = 0; k <= n; ++k) {
      for (const ReplayProgram::Item& item : prog->after[k]) {
        const trace::BufferId b = item.buffer;
        if (b >= back.size()) continue;
        if (item.move == ReplayProgram::Move::kEvict && back[b]) {
          prog->duplicable++;
          prog->duplicable_bytes += rec.buffers[b].bytes;
        }
        back[b] = item.move == ReplayProgram::Move::kPrefetch && item.action < plan.actions.size() &&
                  plan.actions[item.action].kind == policy::ActionKind::kSwapIn &&
                  !rec.buffers[b].allocated_inside && rec.buffers[b].origin == Origin::kArena;
      }
      if (k == n) break;
      for (uint32_t r : prog->recompute_before[k]) {
        for (trace::BufferId b : prog->recomputes[r].written) back[b] = false;
        for (trace::BufferId b : prog->recomputes[r].targets) back[b] = false;
      }
      for (trace::BufferId b : acc.ops[k].writes) back[b] = false;
    }
  }
  size_t kernels = 0;
  for (const ReplayProgram::Recompute& r : prog->recomputes) kernels += r.ops.size();
  prog->summary = fmt::format("{} prefetches, {} evictions of {}, {} discards ({} left to frees), {} recomputes of {} "
                              "launches; {} evictions follow a swap-in with no write in between ({}: read duplication "
                              "could spare their write-backs)",
                              prefetches, evictions, FormatBytes(evicted_bytes), discards, dropped,
                              prog->recomputes.size(), kernels, prog->duplicable, FormatBytes(prog->duplicable_bytes));
  return std::shared_ptr<const ReplayProgram>(std::move(prog));
}

}  // namespace karma::rt
