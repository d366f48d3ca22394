// Compiling a plan into per-position issue lists for the executor.
#include "runtime/session/replay_program.h"

#include <fmt/format.h>

#include <algorithm>

#include "policy/access.h"
#include "policy/plan_builder.h"
#include "runtime/common/units.h"
#include "runtime/session/arena.h"
#include "runtime/session/planning.h"

namespace karma::rt {
namespace {

// Action index of program items that no op waits for.
constexpr uint32_t kNoAction = UINT32_MAX - 1;
// How many ops before its next first use a dead value evicted at its last use is brought back.
constexpr uint32_t kDeadPrefetchLead = 4;

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

// Whether op `o` (as recorded) gives buffer `b` a new value without reading it through an operand whose extent is
// known: a library call, copy or memset's, or a kernel's the profiling iteration measured (ReplayOp::written). The
// executor checks the call's operands again before relying on it.
bool OverwrittenBy(const RecordedIteration& rec, const policy::OpAccess& a, trace::OpId o, trace::BufferId b) {
  if (!Contains(a.writes, b) || Contains(a.reads, b)) return false;
  if (rec.it.ops[o].kind != trace::OpKind::kKernel) return true;
  const ReplayBuffer& rb = rec.buffers[b];
  for (const auto& [addr, bytes] : rec.ops[o].written) {
    if (addr <= rb.address && rb.address + rb.bytes <= addr + bytes) return true;
  }
  return false;
}

}  // namespace

Result<std::shared_ptr<const ReplayProgram>> CompileProgram(const RecordedIteration& rec, const policy::Plan& plan) {
  const trace::Iteration& it = rec.it;
  KARMA_RETURN_IF_ERROR(policy::CheckPlanShape(plan, it));
  if (rec.ops.size() != it.ops.size() || rec.buffers.size() != it.buffers.size()) {
    return Internal("the recorded iteration and its executor view disagree");
  }
  auto prog = std::make_shared<ReplayProgram>();
  const auto n = static_cast<uint32_t>(it.ops.size());
  prog->period = n;
  prog->buffers = rec.buffers;
  prog->after.resize(n + 1);
  prog->waits.resize(n);
  prog->recompute_before.resize(n);
  prog->reads.resize(n);
  prog->overwritten.resize(n);
  prog->in_recompute.assign(n, false);
  prog->actions = plan.actions.size();
  const policy::AccessModel acc = policy::BuildAccessModel(it);
  for (uint32_t p = 0; p < n; ++p) {
    prog->shape.push_back(rec.ops[p].shape);
    prog->stream.push_back(rec.ops[p].stream_key);
    prog->relaunch.push_back(rec.ops[p].relaunch);
    prog->written.push_back(rec.ops[p].written);
    prog->anchors.push_back(rec.ops[p].anchors);
    prog->reads[p] = acc.ops[p].reads;
    std::vector<trace::BufferId> uses = acc.ops[p].reads;
    for (trace::BufferId b : acc.ops[p].writes) AddUnique(uses, b);
    prog->uses.push_back(std::move(uses));
  }
  prog->anchored.assign(rec.buffers.size(), false);
  for (const std::vector<Anchor>& anchors : prog->anchors) {
    for (const Anchor& a : anchors) {
      for (trace::BufferId b : a.buffers) prog->anchored[b] = true;
    }
  }
  prog->alloc_size.assign(rec.allocations, 0);
  prog->in_allocation.resize(rec.allocations);
  for (size_t b = 0; b < rec.buffers.size(); ++b) {
    const ReplayBuffer& rb = rec.buffers[b];
    if (!rb.allocated_inside || rb.alloc_ordinal >= rec.allocations) continue;
    prog->alloc_size[rb.alloc_ordinal] = rb.alloc_bytes;
    prog->in_allocation[rb.alloc_ordinal].push_back(static_cast<trace::BufferId>(b));
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
        if (!rec.buffers[b].exact || rec.buffers[b].shared_scratch) {
          return Unsupported(fmt::format("recompute action {}: op {} ({}) writes buffer {}, whose extent is not "
                                         "known exactly or which is also scratch memory", a, op, it.ops[op].name, b));
        }
        if (!Contains(r.scratch, b)) AddUnique(r.written, b);
      }
      for (const auto* list : {&acc.ops[op].reads, &acc.ops[op].writes}) {
        for (trace::BufferId b : *list) {
          if (!Contains(r.scratch, b)) AddUnique(r.used, b);
        }
      }
    }
    for (trace::OpId op : act.ops) {
      prog->in_recompute[op] = true;
      for (const std::vector<trace::BufferId>& span : rec.ops[op].spans) r.spans.push_back(span);
    }
    recompute_of_action[a] = static_cast<uint32_t>(prog->recomputes.size());
    prog->recompute_before[act.before].push_back(static_cast<uint32_t>(prog->recomputes.size()));
    prog->recomputes.push_back(std::move(r));
  }

  // Per buffer: the first and the last position whose op uses it.
  std::vector<uint32_t> first_use(it.buffers.size(), trace::kNone), last_use(it.buffers.size(), trace::kNone);
  for (uint32_t p = 0; p < n; ++p) {
    for (trace::BufferId b : prog->uses[p]) {
      if (first_use[b] == trace::kNone) first_use[b] = p;
      last_use[b] = p;
    }
  }
  // When the application frees what the plan counts as freed after its last use.
  {
    std::vector<uint32_t> freed_before(it.buffers.size(), trace::kNone);
    for (const trace::Event& e : it.events) {
      if (e.kind == trace::EventKind::kFreeRequested && e.buffer < it.buffers.size()) freed_before[e.buffer] = e.before_op;
    }
    // Entry k of `after` goes out before op k, after the frees made since op k - 1.
    prog->room_from.resize(n + 1);
    for (size_t b = 0; b < it.buffers.size(); ++b) {
      if (!rec.buffers[b].allocated_inside || last_use[b] == trace::kNone || freed_before[b] == trace::kNone) continue;
      for (uint32_t k = last_use[b] + 1; k < freed_before[b] && k <= n; ++k) {
        prog->room_from[k].push_back(static_cast<trace::BufferId>(b));
      }
    }
  }
  // A value evicted at entry `from` of `after` although the plan counts it as gone (memory the application keeps)
  // is given a new value by its next use, before op `next`. A write to a page on the host faults it back (the
  // driver cannot know the old bytes are dead): where that use overwrites all of it, its pages are repopulated
  // right before it with no transfer; otherwise a prefetch brings them back a little earlier.
  size_t repopulated = 0;
  auto renew = [&](trace::BufferId b, uint32_t from, uint32_t next) {
    if (OverwrittenBy(rec, acc.ops[next], next, b)) {
      prog->overwritten[next].push_back(b);
      repopulated++;
      return;
    }
    const uint32_t action = static_cast<uint32_t>(prog->actions++);
    uint32_t issue = next > kDeadPrefetchLead ? next - kDeadPrefetchLead : 0;
    if (next >= from) issue = std::max(issue, from);  // not before the eviction
    prog->after[issue].push_back({ReplayProgram::Move::kPrefetch, b, action, UINT32_MAX, next});
    prog->waits[next].push_back(action);
  };
  size_t prefetches = 0, evictions = 0, discards = 0, dropped = 0, renewed = 0;
  // What the evictions move to the host, and of that what the plan counts as free memory (dead values): on an H100
  // the replay's time followed the bytes written back, dead ones included (docs/gpu-results.md, runs 8 and 9).
  uint64_t evicted_bytes = 0, renewed_bytes = 0, dead_bytes = 0;
  for (uint32_t a = 0; a < plan.actions.size(); ++a) {
    const policy::Action& act = plan.actions[a];
    auto& at = prog->after[static_cast<size_t>(act.after + 1)];
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
        } else if (const bool needed = policy::ValueReadFrom(acc, act.buffer, static_cast<uint32_t>(act.after + 1));
                   needed || !(rb.exact && rb.allocated_inside)) {
          at.push_back({ReplayProgram::Move::kEvict, act.buffer, a, UINT32_MAX});
          evictions++;
          evicted_bytes += rb.bytes;
          if (!needed && !rb.allocated_inside) {
            // Dead until its next use, in memory the application keeps: that use writes it.
            uint32_t next = first_use[act.buffer];
            for (uint32_t p = static_cast<uint32_t>(act.after + 1); p < n; ++p) {
              if (Contains(prog->uses[p], act.buffer)) {
                next = p;
                break;
              }
            }
            renew(act.buffer, static_cast<uint32_t>(act.after + 1), next);
            renewed++;
            renewed_bytes += rb.bytes;
          }
        } else {
          dropped++;  // dead, and freed by the application: the free discards it
        }
        break;
      }
      case policy::ActionKind::kRecompute:
        break;
    }
  }
  // A value in memory the application keeps that a recompute gives a new value without reading it is dead from
  // its last use before that recompute: the plan counts its memory as free from there (a buffer that crosses into
  // later blocks, which the recompute writes again on its way). It is discarded there for that recompute, like
  // the plan's own drops; kept, it would hold device memory the plan gives to others.
  size_t rebuilt = 0;
  for (uint32_t r = 0; r < prog->recomputes.size(); ++r) {
    const ReplayProgram::Recompute& rc = prog->recomputes[r];
    for (trace::BufferId b : rc.written) {
      const ReplayBuffer& rb = rec.buffers[b];
      if (Contains(rc.targets, b) || acc.persistent[b] || rb.allocated_inside || !rb.exact ||
          rb.origin != Origin::kArena || OwnedPageBytes(rb.address, rb.bytes) == 0) {
        continue;
      }
      if (!policy::UseInChain(acc, rc.ops, b).overwrites) continue;
      // Its last use before the recompute: an op, or another recompute (which runs before its op).
      int64_t last = -1;
      for (uint32_t p = 0; p < rc.before; ++p) {
        if (Contains(prog->uses[p], b)) last = p;
      }
      bool shared = false;  // another recompute at the same op uses it
      for (uint32_t o = 0; o < prog->recomputes.size(); ++o) {
        const ReplayProgram::Recompute& other = prog->recomputes[o];
        if (o == r || !Contains(other.used, b)) continue;
        if (other.before < rc.before) last = std::max<int64_t>(last, other.before);
        if (other.before == rc.before) shared = true;
      }
      if (shared || last < 0 || last + 1 >= static_cast<int64_t>(rc.before)) continue;
      bool planned = false;  // the plan moves it in between itself
      for (const policy::Action& act : plan.actions) {
        planned = planned || (act.kind != policy::ActionKind::kRecompute && act.buffer == b &&
                              act.after >= last && act.after < static_cast<int32_t>(rc.before));
      }
      if (planned) continue;
      prog->after[static_cast<size_t>(last + 1)].push_back({ReplayProgram::Move::kDiscard, b, kNoAction, r});
      prog->recomputes[r].targets.push_back(b);
      rebuilt++;
    }
  }
  {
    const trace::Iteration planning = PlanningIteration(it);
    const policy::SimInput in = policy::MakeSimInput(planning, policy::DefaultProfile(), plan.capacity_bytes);
    const std::vector<uint64_t> mem = policy::StaticMemory(in, plan);
    const std::vector<uint32_t> at = policy::OpPositions(policy::ComputeSequence(plan, n), n);
    // The recomputes that run right before an op hold their inputs and outputs there too.
    for (uint32_t p = 0; p < n; ++p) {
      uint64_t most = 0;
      for (uint32_t i = p == 0 ? 0 : at[p - 1] + 1; i <= at[p] && i < mem.size(); ++i) most = std::max(most, mem[i]);
      prog->planned_bytes.push_back(most);
    }
  }
  // The plan counts a buffer's memory as free after its last use. Memory the application frees gets discarded
  // by the arena; memory it keeps (a caching allocator's segments) holds the dead value until the driver evicts
  // it, on the critical path of whatever op needs the room. Those buffers leave by an eviction after their last
  // use: their extent is not known to be one tensor's, so the value is kept (never discarded).
  {
    std::vector<uint32_t> last_live = last_use;
    // A recompute running before op p uses its buffers there.
    for (const ReplayProgram::Recompute& rc : prog->recomputes) {
      for (trace::BufferId b : rc.used) {
        if (last_live[b] == trace::kNone || last_live[b] < rc.before) last_live[b] = rc.before;
      }
    }
    std::vector<bool> moved_after_last(it.buffers.size(), false);
    for (const policy::Action& act : plan.actions) {
      if ((act.kind == policy::ActionKind::kSwapOut || act.kind == policy::ActionKind::kDiscard) &&
          act.buffer < it.buffers.size() && last_live[act.buffer] != trace::kNone &&
          act.after >= static_cast<int32_t>(last_live[act.buffer])) {
        moved_after_last[act.buffer] = true;
      }
    }
    std::vector<trace::BufferId> dead;
    const std::vector<bool> written_back = WrittenBackWhenDead(rec, acc);
    for (size_t b = 0; b < it.buffers.size(); ++b) {
      if (!written_back[b] || last_live[b] == trace::kNone || moved_after_last[b]) continue;
      dead.push_back(static_cast<trace::BufferId>(b));
    }
    // The ops between a buffer's last use and its first use in the next iteration, where it is dead.
    auto gap = [&](trace::BufferId b) { return (first_use[b] + n - last_live[b] - 1) % n; };
    // A dead value stays on the device where the plan leaves room for it over its whole gap (shortest gaps
    // first): an eviction and a prefetch saved, and the device stays within what the plan holds plus that room.
    std::stable_sort(dead.begin(), dead.end(), [&](trace::BufferId x, trace::BufferId y) { return gap(x) < gap(y); });
    std::vector<uint64_t> kept(n, 0);
    for (trace::BufferId id : dead) {
      const uint64_t bytes = PageUp(rec.buffers[id].bytes);
      bool room = prog->planned_bytes.size() == n;
      for (uint32_t k = 0, p = (last_live[id] + 1) % n; room && k < gap(id); ++k, p = (p + 1) % n) {
        room = prog->planned_bytes[p] + kept[p] + bytes <= plan.capacity_bytes;
      }
      if (room) {
        for (uint32_t k = 0, p = (last_live[id] + 1) % n; k < gap(id); ++k, p = (p + 1) % n) kept[p] += bytes;
        prog->dead_kept++;
        continue;
      }
      prog->after[last_live[id] + 1].push_back({ReplayProgram::Move::kEvict, id, kNoAction, UINT32_MAX});
      prog->dead_evictions++;
      dead_bytes += rec.buffers[id].bytes;
      renew(id, last_live[id] + 1, first_use[id]);  // the next iteration's first use
    }
    prog->kept_bytes = std::move(kept);
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
  prog->repopulated = repopulated;
  size_t kernels = 0;
  for (const ReplayProgram::Recompute& r : prog->recomputes) kernels += r.ops.size();
  prog->renewed = renewed;
  prog->summary = fmt::format("{} prefetches, {} evictions of {} ({} of values dead until a later write, {}), {} "
                              "discards ({} left to frees, {} of values a recompute overwrites), {} recomputes of {} "
                              "launches; dead values in memory the application keeps: {} evicted ({}), {} left on the "
                              "device; {} evicted values repopulated for an overwrite, the others brought back; {} "
                              "evictions follow a swap-in with no write in between ({}: read duplication could spare their write-backs)",
                              prefetches, evictions, FormatBytes(evicted_bytes), renewed, FormatBytes(renewed_bytes),
                              discards + rebuilt, dropped, rebuilt, prog->recomputes.size(), kernels,
                              prog->dead_evictions, FormatBytes(dead_bytes), prog->dead_kept, prog->repopulated,
                              prog->duplicable, FormatBytes(prog->duplicable_bytes));
  return std::shared_ptr<const ReplayProgram>(std::move(prog));
}

}  // namespace karma::rt
