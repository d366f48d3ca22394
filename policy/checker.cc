// The schedule checker: a second, separate replay of a simulation's events against the trace's semantics.
#include "policy/checker.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "policy/cost_model.h"
#include "ground/common/units.h"
#include "ground/trace/analysis.h"

namespace karma::policy {
namespace {

constexpr uint32_t kNoValue = UINT32_MAX;       // the host holds nothing usable
constexpr uint32_t kStartValue = UINT32_MAX - 1;  // what a persistent buffer held when the iteration began

bool Near(double a, double b) { return std::fabs(a - b) <= 1e-9 + 1e-9 * std::fabs(b); }

struct Copy {
  bool busy = false;
  double end = 0;
  uint32_t action = 0;
};

struct Buf {
  bool on_device = false;
  bool arriving = false;
  bool leaving = false;
  uint32_t value = kNoValue;       // the value on the device
  uint32_t host_value = kNoValue;  // the value in host memory
  int copying_out = 0;   // swap-outs issued (their anchor op ended) and not finished
  bool free_after_copy = false;
};

class Replay {
 public:
  Replay(const SimInput& in, const Plan& plan, const SimResult& r) : in_(in), it_(*in.it), plan_(plan), r_(r) {}

  Status Run() {
    if (!r_.feasible) return InvalidArgument("the simulation was infeasible: " + r_.reason);
    if (r_.events.empty() && !it_.ops.empty()) return InvalidArgument("the simulation recorded no events");
    BuildSequence();
    BuildExpectations();
    KARMA_RETURN_IF_ERROR(InitState());
    double last_t = 0;
    for (const SimEvent& e : r_.events) {
      if (e.t + 1e-12 < last_t) return Bad(fmt::format("events go back in time ({} after {})", e.t, last_t));
      last_t = e.t;
      now_ = e.t;
      KARMA_RETURN_IF_ERROR(Apply(e));
    }
    return Finish();
  }

 private:
  Status Bad(const std::string& m) const { return Internal(fmt::format("schedule check at t={:.6f}s: {}", now_, m)); }
  uint64_t Bytes(trace::BufferId b) const { return it_.buffers[b].bytes; }

  // Whether an op of the recompute that runs item `c` writes `b` before `c` does.
  bool RebuiltBefore(const ComputeItem& c, trace::BufferId b) const {
    for (trace::OpId r : plan_.actions[c.action].ops) {
      if (r == c.op) return false;
      const auto& w = in_.access.ops[r].writes;
      if (std::find(w.begin(), w.end(), b) != w.end()) return true;
    }
    return false;
  }

  // The compute sequence, derived here from the plan without the simulator's helper.
  void BuildSequence() {
    std::unordered_map<uint32_t, std::vector<uint32_t>> recompute_before;
    for (uint32_t i = 0; i < plan_.actions.size(); ++i) {
      if (plan_.actions[i].kind == ActionKind::kRecompute) recompute_before[plan_.actions[i].before].push_back(i);
    }
    for (uint32_t op = 0; op < it_.ops.size(); ++op) {
      if (auto found = recompute_before.find(op); found != recompute_before.end()) {
        for (uint32_t i : found->second) {
          std::vector<trace::BufferId> scratch = plan_.actions[i].scratch;
          std::sort(scratch.begin(), scratch.end());
          for (trace::OpId r : plan_.actions[i].ops) seq_.push_back({r, i, scratch});
        }
      }
      seq_.push_back({op, trace::kNone, {}});
    }
    // A value dies at its last read before the buffer is overwritten (or at the buffer's last use).
    dies_after_.assign(seq_.size(), {});
    std::vector<int64_t> prev(it_.buffers.size(), -1);
    for (size_t k = 0; k < seq_.size(); ++k) {
      const OpAccess& a = in_.access.ops[seq_[k].op];
      std::vector<trace::BufferId> used;
      for (trace::BufferId b : a.reads) {
        if (!seq_[k].ViaScratch(b)) used.push_back(b);
      }
      for (trace::BufferId b : a.writes) {
        if (seq_[k].ViaScratch(b)) continue;
        const bool overwrite = std::find(a.reads.begin(), a.reads.end(), b) == a.reads.end();
        if (overwrite && prev[b] >= 0) dies_after_[static_cast<size_t>(prev[b])].push_back(b);
        if (overwrite) used.push_back(b);
      }
      for (trace::BufferId b : used) prev[b] = static_cast<int64_t>(k);
    }
    for (size_t b = 0; b < it_.buffers.size(); ++b) {
      if (prev[b] >= 0) dies_after_[static_cast<size_t>(prev[b])].push_back(static_cast<trace::BufferId>(b));
    }
  }

  // What each op reads in program order, and the final values.
  void BuildExpectations() {
    std::vector<uint32_t> value(it_.buffers.size(), kStartValue);
    expect_.resize(it_.ops.size());
    for (const trace::Op& op : it_.ops) {
      const OpAccess& a = in_.access.ops[op.id];
      for (trace::BufferId b : a.reads) expect_[op.id].push_back(value[b]);
      for (trace::BufferId b : a.writes) value[b] = op.id;
    }
    final_ = std::move(value);
  }

  Status InitState() {
    const std::vector<trace::Lifetime> lt = trace::ComputeLifetimes(it_);
    persistent_.resize(it_.buffers.size());
    host_home_.assign(it_.buffers.size(), false);
    for (trace::BufferId b : plan_.host_resident) host_home_[b] = true;
    buf_.resize(it_.buffers.size());
    for (size_t b = 0; b < it_.buffers.size(); ++b) {
      persistent_[b] = lt[b].persistent;
      if (!persistent_[b]) continue;
      if (host_home_[b]) {
        buf_[b].host_value = kStartValue;
      } else {
        buf_[b].on_device = true;
        buf_[b].value = kStartValue;
        used_ += Bytes(static_cast<trace::BufferId>(b));
      }
    }
    peak_ = used_;
    if (used_ > in_.capacity) return Bad("device-resident persistent buffers exceed the capacity");
    anchored_.resize(it_.ops.size());
    for (uint32_t i = 0; i < plan_.actions.size(); ++i) {
      const Action& a = plan_.actions[i];
      if (a.kind == ActionKind::kRecompute) continue;
      if (a.after != kAtStart) anchored_[static_cast<size_t>(a.after)].push_back(i);
      else Issue(a);
    }
    seen_.assign(plan_.actions.size(), 0);
    op_start_.assign(it_.ops.size(), -1);
    op_end_.assign(it_.ops.size(), -1);
    return Status::Ok();
  }

  // A swap-out counts from its issue: the device copy may not go before it has been written back.
  void Issue(const Action& a) {
    if (a.kind != ActionKind::kSwapOut) return;
    Buf& s = buf_[a.buffer];
    s.copying_out++;
    if (!a.keep) s.leaving = true;
  }

  Status Allocate(trace::BufferId b, const char* why) {
    used_ += Bytes(b);
    peak_ = std::max(peak_, used_);
    if (used_ > in_.capacity) {
      return Bad(fmt::format("{} of buffer {} brings device memory to {} over the capacity {}", why, b,
                             FormatBytes(used_), FormatBytes(in_.capacity)));
    }
    return Status::Ok();
  }
  void Release(trace::BufferId b) {
    Buf& s = buf_[b];
    if (s.copying_out > 0) {
      s.free_after_copy = true;
      return;
    }
    if (s.on_device) {
      s.on_device = false;
      s.value = kNoValue;
      used_ -= Bytes(b);
    }
  }

  // The time the action was issued: the end of its anchor op; fails when that has not happened yet.
  Result<double> IssueTime(const Action& a) const {
    if (a.after == kAtStart) return 0.0;
    const double t = op_end_[static_cast<size_t>(a.after)];
    if (t < 0) return Bad(fmt::format("a {} of buffer {} starts before op {} has finished", Name(a.kind), a.buffer,
                                      a.after));
    return t;
  }

  Status Apply(const SimEvent& e) {
    switch (e.kind) {
      case SimEvent::kComputeStart: return ComputeStart(e.index);
      case SimEvent::kComputeEnd: return ComputeEnd(e.index);
      case SimEvent::kCopyStart: return CopyStart(e.index);
      case SimEvent::kCopyEnd: return CopyEnd(e.index);
      case SimEvent::kDiscard: return Discard(e.index);
    }
    return Bad("unknown event kind");
  }

  Status ComputeStart(uint32_t k) {
    if (k != next_ || k >= seq_.size()) return Bad(fmt::format("compute item {} starts, expected {}", k, next_));
    if (computing_) return Bad(fmt::format("compute item {} starts while item {} runs", k, next_ - 1));
    const ComputeItem& c = seq_[k];
    const OpAccess& a = in_.access.ops[c.op];
    const bool own = c.action == trace::kNone;
    if (own) op_start_[c.op] = now_;
    expected_s_ = in_.op_seconds[c.op];
    // An op that starts with a read off the device, or whose new outputs do not fit, runs paged.
    bool off = false;
    uint64_t fresh = 0;
    for (trace::BufferId b : a.reads) off = off || (!c.ViaScratch(b) && !buf_[b].on_device);
    for (trace::BufferId b : a.writes) {
      if (c.ViaScratch(b)) continue;
      if (!buf_[b].on_device && std::find(a.reads.begin(), a.reads.end(), b) == a.reads.end()) fresh += Bytes(b);
    }
    if (!c.scratch.empty() && (k == 0 || seq_[k - 1].action != c.action)) {
      // The recompute's scratch outputs hold memory from its first op to the end of its last.
      scratch_value_.clear();
      used_ += c.ScratchBytes(it_);
      peak_ = std::max(peak_, used_);
      if (used_ > in_.capacity) {
        return Bad(fmt::format("the scratch of recompute action {} brings device memory to {} over the capacity {}",
                               c.action, FormatBytes(used_), FormatBytes(in_.capacity)));
      }
    }
    if (plan_.managed_memory && (off || used_ + fresh > in_.capacity)) {
      if (!c.scratch.empty()) return Bad(fmt::format("op {} (recomputed, with scratch outputs) runs paged", c.op));
      return PagedStart(c);
    }
    for (size_t i = 0; i < a.reads.size(); ++i) {
      const trace::BufferId b = a.reads[i];
      if (c.ViaScratch(b)) {
        const auto v = scratch_value_.find(b);
        if (v == scratch_value_.end() || v->second != expect_[c.op][i]) {
          return Bad(fmt::format("op {} (recomputed) reads buffer {} in scratch memory without the value written by {}",
                                 c.op, b, ValueName(expect_[c.op][i])));
        }
        continue;
      }
      const Buf& s = buf_[b];
      if (!s.on_device || s.arriving) return Bad(fmt::format("op {} reads buffer {}, not on the device", c.op, b));
      if (s.leaving) return Bad(fmt::format("op {} reads buffer {} after its swap-out was issued", c.op, b));
      if (!own && in_.access.FreedBy(b, plan_.actions[c.action].before) && !RebuiltBefore(c, b)) {
        return Bad(fmt::format("op {} (recomputed) reads buffer {}, which the application freed before op {}", c.op,
                               b, in_.access.freed_before[b]));
      }
      if (s.value != expect_[c.op][i]) {
        return Bad(fmt::format("op {}{} reads buffer {} holding the value written by {} instead of {}", c.op,
                               own ? "" : " (recomputed)", b, ValueName(s.value), ValueName(expect_[c.op][i])));
      }
    }
    for (trace::BufferId b : a.writes) {
      if (c.ViaScratch(b)) continue;
      Buf& s = buf_[b];
      if (s.copying_out > 0) return Bad(fmt::format("op {} writes buffer {} before its write-back", c.op, b));
      if (s.leaving) return Bad(fmt::format("op {} writes buffer {} after its swap-out was issued", c.op, b));
      if (s.arriving) return Bad(fmt::format("op {} writes buffer {} while it is swapped in", c.op, b));
      if (!s.on_device) {
        s.on_device = true;
        KARMA_RETURN_IF_ERROR(Allocate(b, "the output"));
      }
    }
    computing_ = true;
    compute_began_ = now_;
    next_++;
    return Status::Ok();
  }

  // Paging is allowed only where nothing else can work: over managed memory, for an op whose own buffers exceed
  // the capacity. Its duration is re-derived here from this replay's own memory state.
  Status PagedStart(const ComputeItem& c) {
    const OpAccess& a = in_.access.ops[c.op];
    std::vector<trace::BufferId> operands = a.reads;
    for (trace::BufferId b : a.writes) {
      if (std::find(operands.begin(), operands.end(), b) == operands.end()) operands.push_back(b);
    }
    uint64_t working = 0, present = 0, faulted = 0;
    for (trace::BufferId b : operands) {
      working += Bytes(b);
      if (buf_[b].on_device) present += Bytes(b);
    }
    if (working <= in_.capacity) {
      return Bad(fmt::format("op {} runs paged although its buffers ({}) fit in the capacity {}: the plan must bring "
                             "them in", c.op, FormatBytes(working), FormatBytes(in_.capacity)));
    }
    if (h2d_.busy || d2h_.busy) return Bad(fmt::format("paged op {} starts while a copy runs", c.op));
    for (size_t i = 0; i < a.reads.size(); ++i) {
      const trace::BufferId b = a.reads[i];
      Buf& s = buf_[b];
      if (s.arriving) return Bad(fmt::format("paged op {} reads buffer {} while it is swapped in", c.op, b));
      if (s.leaving || s.copying_out > 0) {
        return Bad(fmt::format("paged op {} reads buffer {} while it is copied out", c.op, b));
      }
      const uint32_t v = s.on_device ? s.value : s.host_value;
      if (v != expect_[c.op][i]) {
        return Bad(fmt::format("paged op {} reads buffer {} holding the value written by {} instead of {}", c.op, b,
                               ValueName(v), ValueName(expect_[c.op][i])));
      }
      if (!s.on_device) {
        faulted += Bytes(b);
        s.value = s.host_value;
      }
    }
    for (trace::BufferId b : a.writes) {
      const Buf& s = buf_[b];
      if (s.copying_out > 0 || s.leaving || s.arriving) {
        return Bad(fmt::format("paged op {} writes buffer {} while it is copied", c.op, b));
      }
    }
    // Its live operands stay on the device from the last touched back while they fit; the rest goes home.
    const uint64_t other = used_ - present;
    const std::vector<trace::BufferId>& dying = dies_after_[next_];
    uint64_t kept = 0, home = 0;
    paged_home_.clear();
    for (size_t i = operands.size(); i-- > 0;) {
      const trace::BufferId b = operands[i];
      if (!persistent_[b] && std::find(dying.begin(), dying.end(), b) != dying.end()) continue;
      if (home == 0 && kept + Bytes(b) <= in_.capacity) {
        kept += Bytes(b);
      } else {
        home += Bytes(b);
        paged_home_.push_back(b);
      }
    }
    if (other + kept > in_.capacity) {
      return Bad(fmt::format("paged op {} starts with {} of other data on the device: with the {} it keeps, over the "
                             "capacity {}", c.op, FormatBytes(other), FormatBytes(kept), FormatBytes(in_.capacity)));
    }
    for (trace::BufferId b : operands) buf_[b].on_device = true;
    used_ += working - present;
    peak_ = std::max(peak_, in_.capacity);
    expected_s_ += PagingSeconds(in_.hw, faulted, std::max(other + working - in_.capacity, home));
    paging_ = true;
    computing_ = true;
    compute_began_ = now_;
    next_++;
    return Status::Ok();
  }

  Status ComputeEnd(uint32_t k) {
    if (!computing_ || k + 1 != next_) return Bad(fmt::format("compute item {} ends without having started", k));
    const ComputeItem& c = seq_[k];
    if (!Near(now_ - compute_began_, expected_s_)) {
      return Bad(fmt::format("op {} took {}s instead of {}s", c.op, now_ - compute_began_, expected_s_));
    }
    computing_ = false;
    const OpAccess& a = in_.access.ops[c.op];
    for (trace::BufferId b : a.writes) (c.ViaScratch(b) ? scratch_value_[b] : buf_[b].value) = c.op;
    for (trace::BufferId b : dies_after_[k]) {
      if (!persistent_[b]) Release(b);
    }
    if (!c.scratch.empty() && (k + 1 == seq_.size() || seq_[k + 1].action != c.action)) {
      used_ -= c.ScratchBytes(it_);
      scratch_value_.clear();
    }
    if (paging_) {
      paging_ = false;
      for (trace::BufferId b : paged_home_) {
        Buf& s = buf_[b];
        s.host_value = s.value;
        s.on_device = false;
        s.value = kNoValue;
        used_ -= Bytes(b);
      }
      if (used_ > in_.capacity) {
        return Bad(fmt::format("after paged op {}, its live buffers and the rest of device memory take {}, over the "
                               "capacity {}", c.op, FormatBytes(used_), FormatBytes(in_.capacity)));
      }
    }
    if (c.action == trace::kNone) {
      op_end_[c.op] = now_;
      for (uint32_t i : anchored_[c.op]) Issue(plan_.actions[i]);
    }
    return Status::Ok();
  }

  Status CopyStart(uint32_t i) {
    if (i >= plan_.actions.size()) return Bad(fmt::format("copy of unknown action {}", i));
    const Action& a = plan_.actions[i];
    if (seen_[i]++ != 0) return Bad(fmt::format("action {} starts twice", i));
    if (paging_) return Bad(fmt::format("copy {} starts while a paged op runs", i));
    KARMA_ASSIGN_OR_RETURN(const double issued, IssueTime(a));
    if (now_ + 1e-12 < issued) return Bad(fmt::format("action {} starts before its anchor op ended", i));
    Buf& s = buf_[a.buffer];
    if (a.kind == ActionKind::kSwapOut) {
      if (d2h_.busy) return Bad(fmt::format("swap-out {} starts while swap-out {} copies", i, d2h_.action));
      if (!s.on_device || s.arriving) return Bad(fmt::format("swap-out of buffer {}, not on the device", a.buffer));
      d2h_ = {true, now_ + static_cast<double>(it_.buffers[a.buffer].MovedBytes()) / in_.hw.d2h_bw(), i};
      pending_host_value_[i] = s.value;
      return Status::Ok();
    }
    if (a.kind != ActionKind::kSwapIn) return Bad(fmt::format("action {} ({}) is not a copy", i, Name(a.kind)));
    if (h2d_.busy) return Bad(fmt::format("swap-in {} starts while swap-in {} copies", i, h2d_.action));
    if (s.on_device) return Bad(fmt::format("swap-in of buffer {}, already on the device", a.buffer));
    if (s.host_value == kNoValue) return Bad(fmt::format("swap-in of buffer {}: the host holds nothing", a.buffer));
    s.on_device = true;
    s.arriving = true;
    s.value = s.host_value;
    h2d_ = {true, now_ + static_cast<double>(it_.buffers[a.buffer].MovedBytes()) / in_.hw.h2d_bw(), i};
    return Allocate(a.buffer, "the swap-in");
  }

  Status CopyEnd(uint32_t i) {
    if (i >= plan_.actions.size()) return Bad(fmt::format("copy end of unknown action {}", i));
    const Action& a = plan_.actions[i];
    Copy& engine = a.kind == ActionKind::kSwapOut ? d2h_ : h2d_;
    if (!engine.busy || engine.action != i) return Bad(fmt::format("action {} ends without having started", i));
    if (!Near(now_, engine.end)) return Bad(fmt::format("copy {} ends at the wrong time", i));
    engine.busy = false;
    Buf& s = buf_[a.buffer];
    if (a.before != trace::kNone && op_start_[a.before] >= 0) {
      return Bad(fmt::format("op {} started before {} {} (buffer {}) finished", a.before, Name(a.kind), i, a.buffer));
    }
    if (a.kind == ActionKind::kSwapIn) {
      s.arriving = false;
      return Status::Ok();
    }
    s.copying_out--;
    s.host_value = pending_host_value_[i];
    if (s.copying_out == 0 && (!a.keep || s.free_after_copy)) {
      s.free_after_copy = false;
      s.leaving = false;
      Release(a.buffer);
    }
    return Status::Ok();
  }

  Status Discard(uint32_t i) {
    if (i >= plan_.actions.size() || plan_.actions[i].kind != ActionKind::kDiscard) {
      return Bad(fmt::format("discard event for action {}, which is not a discard", i));
    }
    const Action& a = plan_.actions[i];
    if (seen_[i]++ != 0) return Bad(fmt::format("action {} happens twice", i));
    KARMA_ASSIGN_OR_RETURN(const double issued, IssueTime(a));
    if (!Near(now_, issued) && now_ < issued) return Bad(fmt::format("discard {} before its anchor op ended", i));
    Buf& s = buf_[a.buffer];
    if (s.arriving) return Bad(fmt::format("discard of buffer {} while it is swapped in", a.buffer));
    s.leaving = false;
    Release(a.buffer);
    return Status::Ok();
  }

  Status Finish() {
    if (next_ != seq_.size() || computing_) return Bad(fmt::format("only {} of {} compute items ran", next_, seq_.size()));
    if (h2d_.busy || d2h_.busy) return Bad("a copy is still running at the end");
    for (uint32_t i = 0; i < plan_.actions.size(); ++i) {
      if (plan_.actions[i].kind != ActionKind::kRecompute && seen_[i] != 1) {
        return Bad(fmt::format("action {} ({}) never happened", i, Name(plan_.actions[i].kind)));
      }
    }
    for (size_t b = 0; b < buf_.size(); ++b) {
      const Buf& s = buf_[b];
      const bool dead = in_.access.dead_at_wrap[b];
      if (!persistent_[b]) {
        if (s.on_device) return Bad(fmt::format("buffer {} is left on the device", b));
      } else if (host_home_[b]) {
        if (s.on_device) return Bad(fmt::format("host-resident buffer {} is left on the device", b));
        if (!dead && s.host_value != final_[b]) {
          return Bad(fmt::format("host-resident buffer {} ends with the value of {} instead of {}", b,
                                 ValueName(s.host_value), ValueName(final_[b])));
        }
      } else {
        if (!s.on_device) return Bad(fmt::format("device-resident buffer {} is not on the device at the end", b));
        if (!dead && s.value != final_[b]) {
          return Bad(fmt::format("device-resident buffer {} ends with the value of {} instead of {}", b,
                                 ValueName(s.value), ValueName(final_[b])));
        }
      }
    }
    if (peak_ != r_.peak_bytes) {
      return Bad(fmt::format("the replay peaks at {} bytes, the simulator reported {}", peak_, r_.peak_bytes));
    }
    if (!Near(now_, r_.iteration_s)) {
      return Bad(fmt::format("the last event is at {}s, the simulator reported {}s", now_, r_.iteration_s));
    }
    return Status::Ok();
  }

  static std::string ValueName(uint32_t v) {
    if (v == kNoValue) return "nothing";
    if (v == kStartValue) return "the previous iteration";
    return fmt::format("op {}", v);
  }

  const SimInput& in_;
  const trace::Iteration& it_;
  const Plan& plan_;
  const SimResult& r_;
  std::vector<ComputeItem> seq_;
  std::unordered_map<trace::BufferId, uint32_t> scratch_value_;  // the running recompute's scratch outputs
  std::vector<std::vector<trace::BufferId>> dies_after_;  // per compute item
  std::vector<std::vector<uint32_t>> expect_;
  std::vector<uint32_t> final_;
  std::vector<bool> persistent_, host_home_;
  std::vector<Buf> buf_;
  std::vector<std::vector<uint32_t>> anchored_;
  std::vector<int> seen_;
  std::vector<double> op_start_, op_end_;
  std::unordered_map<uint32_t, uint32_t> pending_host_value_;
  uint64_t used_ = 0, peak_ = 0;
  double now_ = 0, compute_began_ = 0;
  double expected_s_ = 0;  // the running item's duration
  size_t next_ = 0;
  bool computing_ = false;
  bool paging_ = false;    // the running item is a paged op
  std::vector<trace::BufferId> paged_home_;  // its live operands that end in host memory
  Copy h2d_, d2h_;
};

}  // namespace

Status CheckSchedule(const SimInput& in, const Plan& plan, const SimResult& result) {
  return Replay(in, plan, result).Run();
}

}  // namespace karma::policy
