// Plan names, shape checks, fingerprints and counts.
#include "policy/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace karma::policy {
namespace {

constexpr const char* kActionNames[] = {"swap_out", "swap_in", "discard", "recompute"};
constexpr const char* kModeNames[] = {"keep", "swap", "recompute"};
static_assert(std::size(kActionNames) == kActionKindCount);
static_assert(std::size(kModeNames) == kBlockModeCount);

template <typename E, size_t N>
bool ParseIn(const char* const (&names)[N], std::string_view s, E* out) {
  const auto found = std::find(std::begin(names), std::end(names), s);
  if (found == std::end(names)) return false;
  *out = static_cast<E>(found - std::begin(names));
  return true;
}

// FNV-1a, 64 bit: stable across platforms and runs, unlike std::hash.
class Fnv {
 public:
  void Add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
  }
  void Add(uint64_t v) { Add(&v, sizeof v); }
  void Add(const std::string& s) {
    Add(s.size());
    Add(s.data(), s.size());
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace

const char* Name(ActionKind k) {
  const size_t i = static_cast<size_t>(k);
  return i < std::size(kActionNames) ? kActionNames[i] : "invalid";
}
bool ParseActionKind(std::string_view s, ActionKind* out) { return ParseIn(kActionNames, s, out); }
const char* Name(BlockMode m) {
  const size_t i = static_cast<size_t>(m);
  return i < std::size(kModeNames) ? kModeNames[i] : "invalid";
}
bool ParseBlockMode(std::string_view s, BlockMode* out) { return ParseIn(kModeNames, s, out); }

Status CheckPlanShape(const Plan& plan, const trace::Iteration& it) {
  const size_t nops = it.ops.size(), nbuf = it.buffers.size();
  for (trace::BufferId b : plan.host_resident) {
    if (b >= nbuf) return InvalidArgument(fmt::format("host_resident names buffer {} of {}", b, nbuf));
  }
  for (size_t i = 0; i < plan.actions.size(); ++i) {
    const Action& a = plan.actions[i];
    const std::string where = fmt::format("action {} ({})", i, Name(a.kind));
    if (static_cast<int>(a.kind) >= kActionKindCount) return InvalidArgument(where + ": unknown kind");
    if (a.after < kAtStart || a.after >= static_cast<int64_t>(nops)) {
      return InvalidArgument(fmt::format("{}: after op {} is out of range (ops: {})", where, a.after, nops));
    }
    if (a.before != trace::kNone && a.before >= nops) {
      return InvalidArgument(fmt::format("{}: before op {} is out of range (ops: {})", where, a.before, nops));
    }
    if (a.kind == ActionKind::kRecompute) {
      if (a.ops.empty()) return InvalidArgument(where + ": no ops to re-run");
      if (a.before == trace::kNone) return InvalidArgument(where + ": recompute without the op it runs before");
      for (trace::OpId op : a.ops) {
        if (op >= nops) return InvalidArgument(fmt::format("{}: op {} is out of range", where, op));
      }
      for (trace::BufferId b : a.scratch) {
        bool written = false;
        for (trace::OpId op : a.ops) {
          const std::vector<trace::BufferId>& w = it.ops[op].writes;
          written = written || std::find(w.begin(), w.end(), b) != w.end();
        }
        if (!written) return InvalidArgument(fmt::format("{}: scratch output {} is not written by its ops", where, b));
      }
      continue;
    }
    if (a.buffer >= nbuf) return InvalidArgument(fmt::format("{}: buffer {} is out of range", where, a.buffer));
    if (a.kind == ActionKind::kSwapIn && a.before != trace::kNone && static_cast<int64_t>(a.before) <= a.after) {
      return InvalidArgument(
          fmt::format("{}: op {} waits for a swap-in issued only after op {}", where, a.before, a.after));
    }
  }
  for (const Block& b : plan.blocks) {
    if (b.first_op > b.last_op || b.last_op >= nops) {
      return InvalidArgument(fmt::format("block [{}, {}] is out of range (ops: {})", b.first_op, b.last_op, nops));
    }
  }
  return Status::Ok();
}

std::string FlagSetTag(const std::vector<bool>& flags) {
  uint64_t h = 1469598103934665603ull;
  bool any = false;
  for (size_t i = 0; i < flags.size(); ++i) {
    if (!flags[i]) continue;
    any = true;
    h = (h ^ i) * 1099511628211ull;
  }
  return any ? fmt::format("{:08x}", static_cast<uint32_t>(h ^ (h >> 32))) : std::string();
}

std::string Fingerprint(const trace::Iteration& it, const std::string& profile, uint64_t capacity_bytes) {
  Fnv h;
  h.Add(std::string("karma-plan-inputs/1"));
  h.Add(profile);
  h.Add(capacity_bytes);
  h.Add(it.buffers.size());
  for (const trace::Buffer& b : it.buffers) {
    h.Add(b.bytes);
    h.Add(static_cast<uint64_t>(b.kind));
  }
  h.Add(it.ops.size());
  for (const trace::Op& op : it.ops) {
    h.Add(op.name);
    h.Add(static_cast<uint64_t>(op.phase));
    h.Add(op.flops);
    h.Add(op.bytes);
    h.Add(op.duration_ns);
    for (const auto* list : {&op.reads, &op.writes, &op.touches}) {
      h.Add(list->size());
      for (trace::BufferId b : *list) h.Add(b);
    }
  }
  return fmt::format("{:016x}", h.value());
}

PlanCounts CountActions(const Plan& plan, const trace::Iteration& it) {
  PlanCounts c;
  for (const Action& a : plan.actions) {
    switch (a.kind) {
      case ActionKind::kSwapOut:
        c.swap_outs++;
        if (a.buffer < it.buffers.size()) c.swap_out_bytes += it.buffers[a.buffer].bytes;
        break;
      case ActionKind::kSwapIn:
        c.swap_ins++;
        if (a.buffer < it.buffers.size()) c.swap_in_bytes += it.buffers[a.buffer].bytes;
        break;
      case ActionKind::kDiscard: c.discards++; break;
      case ActionKind::kRecompute:
        c.recomputes++;
        c.recomputed_ops += a.ops.size();
        break;
    }
  }
  return c;
}

}  // namespace karma::policy
