// The plan simulator: three engines, device capacity, data residency and validity, event by event.
#include "policy/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "policy/cost_model.h"
#include "ground/common/units.h"

namespace karma::policy {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

enum class Dev : uint8_t { kAbsent, kArriving, kValid };

struct BufState {
  Dev dev = Dev::kAbsent;
  bool host_valid = false;
  bool leaving = false;        // a swap-out that frees it was issued: no op may use it until it is back
  bool being_written = false;  // the running compute item writes it
  uint32_t d2h_pending = 0;   // swap-outs issued and not finished: frees wait for them
  bool free_when_copied = false;
  uint32_t uses_left = 0;
};

class Simulation {
 public:
  Simulation(const SimInput& in, const Plan& plan, const SimOptions& opt) : in_(in), plan_(plan), opt_(opt) {}

  SimResult Run() {
    r_.sequence = ComputeSequence(plan_, in_.it->ops.size());
    if (Status st = CheckPlanShape(plan_, *in_.it); !st.ok()) return Fail(st.message());
    if (!Init()) return r_;
    while (true) {
      if (!Progress()) return r_;
      const bool compute_left = next_ < r_.sequence.size() || comp_busy_;
      const bool copies_left = h2d_busy_ || d2h_busy_ || h2d_head_ < h2d_q_.size() || d2h_head_ < d2h_q_.size();
      if (!compute_left && !copies_left && issue_next_ >= issue_order_.size()) break;
      const double t = std::min({comp_busy_ ? comp_end_ : kNever, h2d_busy_ ? h2d_end_ : kNever,
                                 d2h_busy_ ? d2h_end_ : kNever});
      if (t == kNever) return Fail(Deadlock());
      now_ = t;
      // Copies complete before compute at equal times, so their frees are visible to the next op.
      if (d2h_busy_ && d2h_end_ == t) FinishD2H();
      if (h2d_busy_ && h2d_end_ == t) FinishH2D();
      if (comp_busy_ && comp_end_ == t) FinishCompute();
      if (!fail_.empty()) return Fail(fail_);
    }
    if (!CheckEnd()) return r_;
    r_.feasible = true;
    r_.iteration_s = now_;
    r_.stall_s = std::max(0.0, r_.iteration_s - r_.compute_s - r_.recompute_s);
    return r_;
  }

 private:
  const trace::Buffer& B(trace::BufferId b) const { return in_.it->buffers[b]; }
  std::string Describe(trace::BufferId b) const {
    return fmt::format("buffer {} ({}, {})", b, trace::Name(B(b).kind), FormatBytes(B(b).bytes));
  }
  std::string DescribeOp(uint32_t op) const { return fmt::format("op {} ({})", op, in_.it->ops[op].name); }
  std::string DescribeItem(size_t k) const {
    const ComputeItem& c = r_.sequence[k];
    if (c.action == trace::kNone) return DescribeOp(c.op);
    return fmt::format("recomputed {} (action {})", DescribeOp(c.op), c.action);
  }

  SimResult Fail(const std::string& why) {
    r_.feasible = false;
    r_.reason = why;
    r_.iteration_s = now_;
    return r_;
  }

  void Record(SimEvent::Kind k, uint32_t index) {
    if (opt_.record_events) r_.events.push_back({k, now_, index});
  }
  void SetUsed(uint64_t used) {
    used_ = used;
    r_.peak_bytes = std::max(r_.peak_bytes, used_);
    if (!opt_.record_memory || (!r_.memory.empty() && r_.memory.back().second == used_)) return;
    if (!r_.memory.empty() && r_.memory.back().first == now_) r_.memory.back().second = used_;
    else r_.memory.emplace_back(now_, used_);
  }

  bool Init() {
    const trace::Iteration& it = *in_.it;
    buf_.resize(it.buffers.size());
    std::vector<bool> host_home(it.buffers.size(), false);
    for (trace::BufferId b : plan_.host_resident) {
      if (!in_.access.persistent[b]) {
        Fail(fmt::format("host_resident lists {}, which is not persistent", Describe(b)));
        return false;
      }
      host_home[b] = true;
    }
    uint64_t used = 0;
    for (size_t b = 0; b < it.buffers.size(); ++b) {
      if (!in_.access.persistent[b]) continue;
      if (host_home[b]) {
        buf_[b].host_valid = true;
      } else {
        buf_[b].dev = Dev::kValid;
        used += it.buffers[b].bytes;
      }
    }
    SetUsed(used);
    if (used > in_.capacity) {
      Fail(fmt::format("the persistent buffers kept on the device ({}) exceed the capacity ({})", FormatBytes(used),
                       FormatBytes(in_.capacity)));
      return false;
    }
    // A non-persistent buffer is freed after a use when nothing reads its value again: the next use
    // overwrites it (a recompute re-creating an intermediate), or there is none.
    free_after_.assign(r_.sequence.size(), {});
    std::vector<int64_t> last_item(it.buffers.size(), -1);
    for (size_t k = 0; k < r_.sequence.size(); ++k) {
      const ComputeItem& c = r_.sequence[k];
      const OpAccess& a = in_.access.ops[c.op];
      for (trace::BufferId b : a.reads) {
        if (c.ViaScratch(b)) continue;
        buf_[b].uses_left++;
        last_item[b] = static_cast<int64_t>(k);
      }
      for (trace::BufferId b : a.writes) {
        if (c.ViaScratch(b) || std::find(a.reads.begin(), a.reads.end(), b) != a.reads.end()) continue;
        buf_[b].uses_left++;
        if (last_item[b] >= 0 && !in_.access.persistent[b]) free_after_[static_cast<size_t>(last_item[b])].push_back(b);
        last_item[b] = static_cast<int64_t>(k);
      }
    }
    for (size_t b = 0; b < it.buffers.size(); ++b) {
      if (last_item[b] >= 0 && !in_.access.persistent[b]) free_after_[static_cast<size_t>(last_item[b])].push_back(b);
    }
    for (const ComputeItem& c : r_.sequence) {
      if (c.action != trace::kNone && !in_.access.recomputable[c.op]) {
        Fail(fmt::format("recompute action {} re-runs {}, which is not a forward op that only rebuilds "
                         "non-persistent buffers", c.action, DescribeOp(c.op)));
        return false;
      }
    }
    waits_in_.assign(it.ops.size(), 0);
    waits_out_.assign(it.ops.size(), 0);
    for (uint32_t i = 0; i < plan_.actions.size(); ++i) {
      const Action& a = plan_.actions[i];
      if (a.kind == ActionKind::kRecompute) continue;
      issue_order_.push_back(i);
      if (a.before == trace::kNone) continue;
      if (a.kind == ActionKind::kSwapIn) waits_in_[a.before]++;
      if (a.kind == ActionKind::kSwapOut) waits_out_[a.before]++;
    }
    std::stable_sort(issue_order_.begin(), issue_order_.end(),
                     [&](uint32_t x, uint32_t y) { return plan_.actions[x].after < plan_.actions[y].after; });
    return true;
  }

  // Issues the actions whose anchor op has completed, in order.
  void IssueDue() {
    while (issue_next_ < issue_order_.size()) {
      const uint32_t i = issue_order_[issue_next_];
      const Action& a = plan_.actions[i];
      if (a.after != kAtStart && done_ops_ <= a.after) return;
      issue_next_++;
      BufState& s = buf_[a.buffer];
      switch (a.kind) {
        case ActionKind::kSwapOut:
          if (s.dev != Dev::kValid || s.leaving) {
            fail_ = fmt::format("swap-out of {} after op {}: it is not on the device", Describe(a.buffer), a.after);
            return;
          }
          if (!a.keep) s.leaving = true;
          s.d2h_pending++;
          d2h_q_.push_back(i);
          break;
        case ActionKind::kSwapIn: h2d_q_.push_back(i); break;
        case ActionKind::kDiscard:
          Record(SimEvent::kDiscard, i);
          if (s.dev == Dev::kArriving) {
            fail_ = fmt::format("discard of {} after op {} while it is being swapped in", Describe(a.buffer), a.after);
            return;
          }
          s.leaving = false;
          Free(a.buffer);
          break;
        case ActionKind::kRecompute: break;
      }
    }
  }

  bool FirstOfAction(size_t k) const {
    return r_.sequence[k].action != trace::kNone && (k == 0 || r_.sequence[k - 1].action != r_.sequence[k].action);
  }
  bool LastOfAction(size_t k) const {
    return r_.sequence[k].action != trace::kNone &&
           (k + 1 == r_.sequence.size() || r_.sequence[k + 1].action != r_.sequence[k].action);
  }

  void Free(trace::BufferId b) {
    BufState& s = buf_[b];
    if (s.d2h_pending > 0) {
      s.free_when_copied = true;
      return;
    }
    if (s.dev != Dev::kAbsent) {
      s.dev = Dev::kAbsent;
      SetUsed(used_ - B(b).bytes);
    }
  }

  // Starts whatever can start now; false on an invalid plan.
  bool Progress() {
    bool moved = true;
    while (moved && fail_.empty()) {
      moved = false;
      IssueDue();
      if (!fail_.empty()) break;
      moved |= TryD2H();
      moved |= TryH2D();
      moved |= TryCompute();
    }
    if (!fail_.empty()) {
      Fail(fail_);
      return false;
    }
    return true;
  }

  bool TryD2H() {
    if (paging_ || drain_ || d2h_busy_ || d2h_head_ >= d2h_q_.size()) return false;
    const uint32_t i = d2h_q_[d2h_head_];
    const Action& a = plan_.actions[i];
    BufState& s = buf_[a.buffer];
    if (s.being_written) return false;
    d2h_head_++;
    d2h_busy_ = true;
    d2h_action_ = i;
    const double secs = static_cast<double>(B(a.buffer).MovedBytes()) / in_.hw.d2h_bw();
    d2h_end_ = now_ + secs;
    r_.d2h_busy_s += secs;
    r_.swap_out_bytes += B(a.buffer).bytes;
    Record(SimEvent::kCopyStart, i);
    return true;
  }

  void FinishD2H() {
    d2h_busy_ = false;
    const Action& a = plan_.actions[d2h_action_];
    BufState& s = buf_[a.buffer];
    s.d2h_pending--;
    s.host_valid = true;
    Record(SimEvent::kCopyEnd, d2h_action_);
    if (a.before != trace::kNone) waits_out_[a.before]--;
    if (s.d2h_pending == 0 && (!a.keep || s.free_when_copied)) {
      s.free_when_copied = false;
      s.leaving = false;
      Free(a.buffer);
    }
  }

  bool TryH2D() {
    if (paging_ || drain_ || h2d_busy_ || h2d_head_ >= h2d_q_.size()) return false;
    const uint32_t i = h2d_q_[h2d_head_];
    const Action& a = plan_.actions[i];
    BufState& s = buf_[a.buffer];
    if (s.d2h_pending > 0 || s.leaving) return false;  // its swap-out has not finished: the copy back waits
    if (s.dev != Dev::kAbsent) {
      fail_ = fmt::format("swap-in of {} after op {}: it is already on the device", Describe(a.buffer), a.after);
      return false;
    }
    if (!s.host_valid) {
      fail_ = fmt::format("swap-in of {} after op {}: the host holds no valid copy (it was written on the device "
                          "after its last swap-out, or never swapped out)", Describe(a.buffer), a.after);
      return false;
    }
    if (s.uses_left == 0) {
      fail_ = fmt::format("swap-in of {} after op {}: no later op uses it", Describe(a.buffer), a.after);
      return false;
    }
    const uint64_t bytes = B(a.buffer).bytes;
    if (used_ + bytes > in_.capacity) return false;
    h2d_head_++;
    s.dev = Dev::kArriving;
    SetUsed(used_ + bytes);
    h2d_busy_ = true;
    h2d_action_ = i;
    const double secs = static_cast<double>(B(a.buffer).MovedBytes()) / in_.hw.h2d_bw();
    h2d_end_ = now_ + secs;
    r_.h2d_busy_s += secs;
    r_.swap_in_bytes += bytes;
    Record(SimEvent::kCopyStart, i);
    return true;
  }

  void FinishH2D() {
    h2d_busy_ = false;
    const Action& a = plan_.actions[h2d_action_];
    buf_[a.buffer].dev = Dev::kValid;
    Record(SimEvent::kCopyEnd, h2d_action_);
    if (a.before != trace::kNone) waits_in_[a.before]--;
  }

  bool TryCompute() {
    drain_ = false;
    if (comp_busy_ || next_ >= r_.sequence.size()) return false;
    const ComputeItem& c = r_.sequence[next_];
    const OpAccess& a = in_.access.ops[c.op];
    const bool own = c.action == trace::kNone;
    if (own && (waits_in_[c.op] > 0 || waits_out_[c.op] > 0)) return false;
    if (in_.Paged(c.op) && !c.scratch.empty()) {
      fail_ = fmt::format("{} runs paged with scratch outputs", DescribeItem(next_));
      return false;
    }
    if (in_.Paged(c.op)) return plan_.managed_memory && TryComputePaged(c, a, own);
    for (trace::BufferId b : a.reads) {
      if (c.ViaScratch(b)) continue;
      const BufState& s = buf_[b];
      if (s.leaving) {
        fail_ = fmt::format("{} reads {} after a swap-out that frees it was issued", DescribeItem(next_), Describe(b));
        return false;
      }
      if (s.dev != Dev::kValid) return false;
    }
    // A recompute's scratch is allocated when its first op starts and freed when its last op ends.
    uint64_t need = FirstOfAction(next_) ? c.ScratchBytes(*in_.it) : 0;
    for (trace::BufferId b : a.writes) {
      if (c.ViaScratch(b)) continue;
      const BufState& s = buf_[b];
      if (s.leaving) {
        fail_ = fmt::format("{} writes {} after a swap-out that frees it was issued", DescribeItem(next_), Describe(b));
        return false;
      }
      if (s.d2h_pending > 0 || s.dev == Dev::kArriving) return false;
      if (s.dev == Dev::kAbsent) need += B(b).bytes;
    }
    if (used_ + need > in_.capacity) return false;
    for (trace::BufferId b : a.writes) {
      if (c.ViaScratch(b)) continue;
      BufState& s = buf_[b];
      s.dev = Dev::kValid;
      s.host_valid = false;
      s.being_written = true;
    }
    SetUsed(used_ + need);
    comp_busy_ = true;
    comp_item_ = next_++;
    const double secs = in_.op_seconds[c.op];
    comp_end_ = now_ + secs;
    (own ? r_.compute_s : r_.recompute_s) += secs;
    Record(SimEvent::kComputeStart, static_cast<uint32_t>(comp_item_));
    return true;
  }

  // A paged op (see Simulate): starts when the copy engines are idle and its live operands fit beside the
  // rest of device memory; meanwhile no copy starts (drain_), so that the faults have the link.
  bool TryComputePaged(const ComputeItem& c, const OpAccess& a, bool own) {
    uint64_t resident = 0, faulted = 0, fresh = 0;
    for (trace::BufferId b : a.reads) {
      const BufState& s = buf_[b];
      if (s.dev == Dev::kArriving || s.d2h_pending > 0) return false;  // once on the host, it faults in
      if (s.dev == Dev::kValid) resident += B(b).bytes;
      else if (s.host_valid) faulted += B(b).bytes;
      else return false;  // nothing valid to fault in: Deadlock() says so
    }
    for (trace::BufferId b : a.writes) {
      if (std::find(a.reads.begin(), a.reads.end(), b) != a.reads.end()) continue;
      const BufState& s = buf_[b];
      if (s.leaving) {
        fail_ = fmt::format("{} writes {} after a swap-out that frees it was issued", DescribeItem(next_), Describe(b));
        return false;
      }
      if (s.d2h_pending > 0 || s.dev == Dev::kArriving) return false;
      (s.dev == Dev::kValid ? resident : fresh) += B(b).bytes;
    }
    const uint64_t working = resident + faulted + fresh;
    const std::vector<trace::BufferId>& dead = free_after_[next_];
    PagedEnd end = SettlePagedOp(in_, c.op, in_.capacity, [&](trace::BufferId b) {
      return std::find(dead.begin(), dead.end(), b) == dead.end();
    });
    const uint64_t other = used_ - resident;
    if (other + end.kept_bytes > in_.capacity) return false;  // what it keeps would not fit afterwards
    drain_ = true;
    if (h2d_busy_ || d2h_busy_) return false;
    drain_ = false;
    // working > capacity: there is always some overflow.
    const uint64_t evicted = std::max(other + working - in_.capacity, end.home_bytes);
    const double paging = PagingSeconds(in_.hw, faulted, evicted);
    for (trace::BufferId b : a.reads) buf_[b].dev = Dev::kValid;
    for (trace::BufferId b : a.writes) {
      BufState& s = buf_[b];
      s.dev = Dev::kValid;
      s.host_valid = false;
      s.being_written = true;
    }
    paged_end_used_ = other + end.kept_bytes;
    paged_home_ = std::move(end.sent_home);
    SetUsed(in_.capacity);
    paging_ = true;
    comp_busy_ = true;
    comp_item_ = next_++;
    const double secs = in_.op_seconds[c.op];
    comp_end_ = now_ + secs + paging;
    (own ? r_.compute_s : r_.recompute_s) += secs;
    r_.paged_ops++;
    r_.paging_s += paging;
    r_.paged_in_bytes += faulted;
    r_.paged_out_bytes += evicted;
    r_.swap_in_bytes += faulted;
    r_.swap_out_bytes += evicted;
    Record(SimEvent::kComputeStart, static_cast<uint32_t>(comp_item_));
    return true;
  }

  void FinishCompute() {
    comp_busy_ = false;
    const ComputeItem& c = r_.sequence[comp_item_];
    const OpAccess& a = in_.access.ops[c.op];
    Record(SimEvent::kComputeEnd, static_cast<uint32_t>(comp_item_));
    for (trace::BufferId b : a.writes) {
      if (!c.ViaScratch(b)) buf_[b].being_written = false;
    }
    for (trace::BufferId b : a.reads) {
      if (!c.ViaScratch(b)) buf_[b].uses_left--;
    }
    for (trace::BufferId b : a.writes) {
      if (!c.ViaScratch(b) && std::find(a.reads.begin(), a.reads.end(), b) == a.reads.end()) buf_[b].uses_left--;
    }
    if (!c.scratch.empty() && LastOfAction(comp_item_)) SetUsed(used_ - c.ScratchBytes(*in_.it));
    if (paging_) {
      // The dead operands go, and the live ones it could not keep are in host memory.
      paging_ = false;
      for (trace::BufferId b : free_after_[comp_item_]) buf_[b].dev = Dev::kAbsent;
      for (trace::BufferId b : paged_home_) {
        buf_[b].dev = Dev::kAbsent;
        buf_[b].host_valid = true;
      }
      SetUsed(paged_end_used_);
    } else {
      for (trace::BufferId b : free_after_[comp_item_]) Free(b);
    }
    if (c.action == trace::kNone) done_ops_ = static_cast<int64_t>(c.op) + 1;
  }

  // Nothing runs and nothing can start: say what the compute engine waits for.
  std::string Deadlock() const {
    if (next_ >= r_.sequence.size()) {
      if (h2d_head_ < h2d_q_.size()) {
        const Action& a = plan_.actions[h2d_q_[h2d_head_]];
        return fmt::format("swap-in of {} never finds {} free (capacity {}, in use {})", Describe(a.buffer),
                           FormatBytes(B(a.buffer).bytes), FormatBytes(in_.capacity), FormatBytes(used_));
      }
      return "the copy engines stopped with work left";
    }
    const ComputeItem& c = r_.sequence[next_];
    const OpAccess& a = in_.access.ops[c.op];
    const std::string who = DescribeItem(next_);
    if (in_.Paged(c.op) && !plan_.managed_memory) {
      return fmt::format("{} touches {}, more than the capacity {}: only paging over managed memory can run it, and "
                         "this plan allocates device memory explicitly", who, FormatBytes(in_.working_set[c.op]),
                         FormatBytes(in_.capacity));
    }
    if (c.action == trace::kNone && waits_in_[c.op] > 0) {
      return fmt::format("{} waits for a swap-in that can never start (the host-to-device queue is stuck: "
                         "capacity {}, in use {})", who, FormatBytes(in_.capacity), FormatBytes(used_));
    }
    for (trace::BufferId b : a.reads) {
      if (buf_[b].dev == Dev::kValid) continue;
      if (!in_.Paged(c.op)) {
        return fmt::format("{} reads {}, which is not on the device and nothing brings it back in time", who,
                           Describe(b));
      }
      if (!buf_[b].host_valid) {
        return fmt::format("{} (paged) reads {}, which is neither on the device nor valid in host memory", who,
                           Describe(b));
      }
    }
    if (in_.Paged(c.op)) {
      return fmt::format("paged {} cannot start: its live buffers and the {} in use beside them exceed the "
                         "capacity {}", who, FormatBytes(used_), FormatBytes(in_.capacity));
    }
    uint64_t need = 0;
    for (trace::BufferId b : a.writes) {
      if (buf_[b].dev == Dev::kAbsent) need += B(b).bytes;
    }
    return fmt::format("capacity exceeded at {}: its outputs need {} more, but {} of the {} capacity are in use "
                       "and nothing in flight frees memory", who, FormatBytes(need), FormatBytes(used_),
                       FormatBytes(in_.capacity));
  }

  bool CheckEnd() {
    std::vector<bool> host_home(buf_.size(), false);
    for (trace::BufferId b : plan_.host_resident) host_home[b] = true;
    for (size_t b = 0; b < buf_.size(); ++b) {
      const BufState& s = buf_[b];
      const auto id = static_cast<trace::BufferId>(b);
      if (!in_.access.persistent[b]) {
        if (s.dev != Dev::kAbsent) {
          Fail(fmt::format("{} is still on the device at the end of the iteration", Describe(id)));
          return false;
        }
        continue;
      }
      if (host_home[b]) {
        if (s.dev != Dev::kAbsent) {
          Fail(fmt::format("host-resident {} is still on the device at the end of the iteration", Describe(id)));
          return false;
        }
        if (!s.host_valid && !in_.access.dead_at_wrap[b]) {
          Fail(fmt::format("host-resident {} was changed on the device but not written back", Describe(id)));
          return false;
        }
      } else if (s.dev != Dev::kValid) {
        Fail(fmt::format("device-resident {} is not on the device at the end of the iteration", Describe(id)));
        return false;
      }
    }
    return true;
  }

  const SimInput& in_;
  const Plan& plan_;
  const SimOptions& opt_;
  SimResult r_;
  std::vector<BufState> buf_;
  std::vector<uint32_t> waits_in_, waits_out_;
  std::vector<std::vector<trace::BufferId>> free_after_;  // per compute item
  std::vector<uint32_t> issue_order_;
  size_t issue_next_ = 0;
  std::vector<uint32_t> h2d_q_, d2h_q_;
  size_t h2d_head_ = 0, d2h_head_ = 0;
  uint64_t used_ = 0;
  int64_t done_ops_ = 0;
  double now_ = 0;
  size_t next_ = 0, comp_item_ = 0;
  bool comp_busy_ = false, h2d_busy_ = false, d2h_busy_ = false;
  double comp_end_ = 0, h2d_end_ = 0, d2h_end_ = 0;
  uint32_t h2d_action_ = 0, d2h_action_ = 0;
  bool paging_ = false;          // a paged op runs: no copy starts
  bool drain_ = false;           // a paged op is ready but for the copy engines: no new copy starts
  uint64_t paged_end_used_ = 0;  // device bytes once the running paged op ends
  std::vector<trace::BufferId> paged_home_;  // its live operands that end in host memory
  std::string fail_;
};

}  // namespace

SimInput MakeSimInput(const trace::Iteration& it, const HwProfile& hw, uint64_t capacity) {
  SimInput in;
  in.it = &it;
  in.access = BuildAccessModel(it);
  in.op_seconds = OpTimes(it, hw);
  in.hw = hw;
  in.capacity = capacity;
  in.working_set.resize(it.ops.size());
  for (size_t i = 0; i < it.ops.size(); ++i) {
    const OpAccess& a = in.access.ops[i];
    uint64_t bytes = 0;
    for (trace::BufferId b : a.reads) bytes += it.buffers[b].bytes;
    for (trace::BufferId b : a.writes) {
      if (std::find(a.reads.begin(), a.reads.end(), b) == a.reads.end()) bytes += it.buffers[b].bytes;
    }
    in.working_set[i] = bytes;
  }
  return in;
}

std::vector<ComputeItem> ComputeSequence(const Plan& plan, size_t num_ops) {
  std::vector<std::vector<uint32_t>> before(num_ops);
  for (uint32_t i = 0; i < plan.actions.size(); ++i) {
    const Action& a = plan.actions[i];
    if (a.kind == ActionKind::kRecompute && a.before < num_ops) before[a.before].push_back(i);
  }
  std::vector<ComputeItem> seq;
  seq.reserve(num_ops);
  for (uint32_t op = 0; op < num_ops; ++op) {
    for (uint32_t i : before[op]) {
      std::vector<trace::BufferId> scratch = plan.actions[i].scratch;
      std::sort(scratch.begin(), scratch.end());
      for (trace::OpId r : plan.actions[i].ops) {
        if (r < num_ops) seq.push_back({r, i, scratch});
      }
    }
    seq.push_back({op, trace::kNone, {}});
  }
  return seq;
}

SimResult Simulate(const SimInput& in, const Plan& plan, const SimOptions& options) {
  return Simulation(in, plan, options).Run();
}

std::vector<double> OccupancyOverTime(const SimResult& r, int bins) {
  std::vector<double> busy(static_cast<size_t>(std::max(bins, 1)), 0.0);
  if (r.iteration_s <= 0) return busy;
  const double width = r.iteration_s / static_cast<double>(busy.size());
  double start = 0;
  for (const SimEvent& e : r.events) {
    if (e.kind == SimEvent::kComputeStart) start = e.t;
    if (e.kind != SimEvent::kComputeEnd) continue;
    for (size_t k = static_cast<size_t>(start / width); k < busy.size(); ++k) {
      const double lo = std::max(start, width * static_cast<double>(k));
      const double hi = std::min(e.t, width * static_cast<double>(k + 1));
      if (hi <= lo) break;
      busy[k] += hi - lo;
    }
  }
  for (double& b : busy) b /= width;
  return busy;
}

}  // namespace karma::policy
