// Planning inside libkarma.so: profile choice, the planning iteration, recompute eligibility, the plan cache.
#include "runtime/plan/planning.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "policy/cost_model.h"
#include "policy/plan_io.h"
#include "policy/strategies.h"
#include "ground/common/log.h"
#include "ground/common/managed_pages.h"
#include "ground/common/units.h"
#include "runtime/residency/arena.h"
#include "ground/trace/analysis.h"
#include "solver/plan_cache.h"
#include "solver/planner.h"

namespace karma::rt {

const policy::HwProfile& ProfileForDevice(const std::string& device_name) {
  static const struct {
    const char* marker;
    const char* profile;
  } kByName[] = {{"V100", "v100-16g-pcie3"},
                 {"A100", "a100-40g-pcie4"},
                 // Its moves are managed memory's (the profile's default MovePath), at the rates measured on an
                 // H100: a third to a seventh of the copy engines' rate.
                 {"H100", "h100-80g"},
                 // An H200 is an H100 with more and faster memory behind the same PCIe 5.0 x16 host link: the
                 // link's figures, which are what the plan's transfers depend on, are the H100's. Not the GH200,
                 // whose host link is NVLink-C2C.
                 {"H200", "h100-80g"}};
  for (const auto& m : kByName) {
    if (device_name.find(m.marker) == std::string::npos || device_name.find("GH200") != std::string::npos) continue;
    for (const policy::HwProfile& p : policy::AllProfiles()) {
      if (std::string_view(p.name) == m.profile) return p;
    }
  }
  return policy::DefaultProfile();
}

namespace {

constexpr double kLinkSlower = 0.8, kLinkFaster = 1.25;

// The page moves go by on `profile`'s path (PlanningIteration).
uint64_t MovePage(const policy::HwProfile& profile) {
  return profile.moves == policy::MovePath::kCopy ? kLargePage : kResidencyPage;
}

// Per buffer: allocated inside the iteration (else memory the application keeps).
std::vector<bool> AllocatedInside(const trace::Iteration& it) {
  std::vector<bool> inside(it.buffers.size(), false);
  for (const trace::Event& e : it.events) {
    if (e.kind == trace::EventKind::kAlloc && e.buffer < inside.size()) inside[e.buffer] = true;
  }
  return inside;
}

// A buffer packed in a slab that the application keeps: the executor moves only the pages it owns.
bool KeptInSlab(const trace::Buffer& b, const std::vector<bool>& inside) {
  return b.bytes <= kSmallLimit && !inside[b.id] && b.address != 0;
}

}  // namespace

bool LinkDeparts(const policy::HwProfile& assumed, double h2d_bw, double d2h_bw) {
  auto departs = [](double measured, double planned) {
    return measured > 0 && planned > 0 && (measured < kLinkSlower * planned || measured > kLinkFaster * planned);
  };
  return departs(h2d_bw, assumed.h2d_bw()) || departs(d2h_bw, assumed.d2h_bw());
}

uint64_t UnmovableBytes(const trace::Iteration& it, const policy::HwProfile& profile) {
  const uint64_t page = MovePage(profile);
  const std::vector<bool> inside = AllocatedInside(it);
  std::vector<uint64_t> pages;
  for (const trace::Buffer& b : it.buffers) {
    if (!KeptInSlab(b, inside) || b.bytes == 0) continue;
    // The pages it shares, those it does not own whole: only its first and last can be.
    const uint64_t end = b.address + b.bytes;
    if (b.address % page != 0) pages.push_back(AlignDown(b.address, page));
    if (end % page != 0) pages.push_back(AlignDown(end, page));
  }
  std::sort(pages.begin(), pages.end());
  return static_cast<uint64_t>(std::unique(pages.begin(), pages.end()) - pages.begin()) * page;
}

trace::Iteration PlanningIteration(const trace::Iteration& it, const policy::HwProfile& profile) {
  const bool copies = profile.moves == policy::MovePath::kCopy;
  const uint64_t page = MovePage(profile);
  const std::vector<bool> inside = AllocatedInside(it);
  trace::Iteration p = it;
  for (trace::Buffer& b : p.buffers) {
    if (KeptInSlab(b, inside)) {
      // What it shares with its neighbours stays on the device, outside the plan (UnmovableBytes).
      b.bytes = OwnedPageBytes(b.address, b.bytes, page);
      continue;
    }
    if (b.bytes <= kSmallLimit) continue;
    if (copies && b.bytes % page != 0) b.moved_bytes = b.bytes;
    b.bytes = AlignUp(b.bytes, page);  // a large buffer owns its pages, the last one too
  }
  // The policy frees a buffer right after its last use; an application often frees it a few ops later, and until
  // then its pages stay on the device. The op right before the free is made to read it, so that the plan counts
  // that memory (the executor compiles its program from the recorded iteration, where the read does not exist).
  const std::vector<trace::Lifetime> lt = trace::ComputeLifetimes(it);
  for (const trace::Event& e : p.events) {
    if (e.kind != trace::EventKind::kFreeRequested || e.buffer >= lt.size()) continue;
    const uint32_t last = lt[e.buffer].last;
    if (last == trace::kNone || e.before_op <= last + 1 || e.before_op > p.ops.size()) continue;
    std::vector<trace::BufferId>& reads = p.ops[e.before_op - 1].reads;
    if (std::find(reads.begin(), reads.end(), e.buffer) == reads.end()) reads.push_back(e.buffer);
  }
  // Memory the application keeps (allocated before the iteration: weights, optimizer state, a caching allocator's
  // segments) holds its bytes from one iteration to the next: KARMA cannot tell when a value in it is dead, so it
  // never discards one there, and the plan counts it as held throughout (its first use reads it).
  std::vector<bool> seen(p.buffers.size(), false);
  for (trace::Op& op : p.ops) {
    for (const auto* list : {&op.reads, &op.writes, &op.touches}) {
      for (trace::BufferId b : *list) {
        if (b >= seen.size() || seen[b]) continue;
        seen[b] = true;
        if (!inside[b] && std::find(op.reads.begin(), op.reads.end(), b) == op.reads.end()) op.reads.push_back(b);
      }
    }
  }
  return p;
}

std::vector<bool> RecomputableByExecutor(const RecordedIteration& rec) {
  std::vector<bool> ok(rec.it.ops.size(), false);
  for (size_t i = 0; i < rec.it.ops.size(); ++i) {
    const trace::Op& op = rec.it.ops[i];
    bool exact = rec.ops[i].relaunch != nullptr;
    for (const auto* list : {&op.writes, &op.touches}) {
      for (trace::BufferId b : *list) exact = exact && rec.buffers[b].exact;
    }
    ok[i] = exact;
  }
  return ok;
}

std::string PlanKey(const trace::Iteration& planning, const policy::HwProfile& profile, uint64_t capacity,
                    const PlanFlags& flags) {
  trace::Iteration shape = planning;
  for (trace::Op& op : shape.ops) op.duration_ns = 0;
  // The planner's version is part of it: a plan an older planner made for the same inputs is made again.
  std::string key =
      policy::Fingerprint(shape, fmt::format("{} (planner {})", policy::ProfileLabel(profile), solver::kPlannerVersion),
                          capacity);
  // Ops excluded after a failed validation make a different plan for the same iteration.
  if (const std::string tag = policy::FlagSetTag(flags.no_recompute); !tag.empty()) key += "-" + tag;
  // So do buffers homed on the host.
  if (const std::string tag = policy::FlagSetTag(flags.host_home); !tag.empty()) key += "-h" + tag;
  return key;
}

Result<PlanOutcome> MakeRuntimePlan(const PlanRequest& req) {
  if (req.recorded == nullptr) return InvalidArgument("no recorded iteration");
  const RecordedIteration& rec = *req.recorded;
  const trace::Iteration planning = PlanningIteration(rec.it, req.profile);
  PlanOutcome out;
  out.key = PlanKey(planning, req.profile, req.capacity, req.flags);
  if (!req.cache_dir.empty()) out.path = req.cache_dir + "/" + out.key + ".plan.json";

  policy::SimInput in = policy::MakeSimInput(planning, req.profile, req.capacity);
  policy::HomeOnHost(in.access, req.flags.host_home);
  out.incore_s = policy::IdealSeconds(in.op_seconds);
  const std::vector<trace::Lifetime> lifetimes = trace::ComputeLifetimes(planning);
  out.incore_peak_bytes = trace::IdealMemory(planning, lifetimes).peak_bytes;
  const trace::HeldMemoryCurve held = trace::HeldMemory(planning, lifetimes);
  out.held_peak_bytes = held.memory.peak_bytes;
  out.late_freed_buffers = held.late_buffers;
  out.most_late_bytes = held.most_late_bytes;
  for (size_t b = 0; b < req.flags.host_home.size() && b < planning.buffers.size(); ++b) {
    if (!req.flags.host_home[b]) continue;
    out.homed_bytes += rec.it.buffers[b].bytes;
    out.homed_owned_bytes += planning.buffers[b].bytes;
  }
  for (trace::OpId op = 0; op < in.working_set.size(); ++op) {
    if (!in.Paged(op)) continue;
    out.paged_ops++;
    if (in.working_set[op] > out.largest_op_bytes) {
      out.largest_op = op;
      out.largest_op_bytes = in.working_set[op];
    }
  }
  if (!req.ilp && !out.path.empty() && ::access(out.path.c_str(), R_OK) == 0) {
    auto cached = policy::ReadPlanFile(out.path);
    if (cached.ok() && cached->fingerprint == out.key && policy::CheckPlanShape(*cached, planning).ok()) {
      out.plan = std::move(cached).value();
      out.reused = true;
      return out;
    }
    KARMA_LOG(kInfo, "plan file {} is not usable ({}); planning again", out.path,
              cached.ok() ? "made for other inputs" : cached.status().message());
  }

  const std::vector<bool> can = RecomputableByExecutor(rec);
  for (size_t i = 0; i < in.access.recomputable.size(); ++i) {
    const bool excluded = i < req.flags.no_recompute.size() && req.flags.no_recompute[i];
    if (in.access.recomputable[i] && !can[i]) {
      KARMA_LOG(kDebug, "op {} ({}) cannot be recomputed by the executor", i, rec.it.ops[i].name);
    }
    in.access.recomputable[i] = in.access.recomputable[i] && can[i] && !excluded;
  }
  policy::Evaluation e;
  if (req.ilp) {
    solver::SolverOptions options;
    options.progress = nullptr;  // the application's stderr is not the planner's
    options.cancel = req.cancel;
    e = solver::Evaluate("karma", in, {}, options);
    solver::FreeThreadSolverMemory();  // the worker thread's GLPK environment
  } else {
    e = policy::Evaluate("karma", in);
  }
  if (!e.feasible) return Infeasible(e.reason);
  out.plan = std::move(e.plan);
  out.plan.fingerprint = out.key;
  out.plan.profile = policy::ProfileLabel(req.profile);
  out.plan.capacity_bytes = req.capacity;
  out.simulated_s = e.sim.iteration_s;
  out.improves = !(req.ilp && req.improve_on_s > 0) || out.simulated_s < req.improve_on_s;
  if (!out.improves) out.path.clear();
  if (!out.path.empty()) {
    Status st = policy::WritePlanFile(out.path, out.plan);
    if (!st.ok()) {
      KARMA_LOG(kWarn, "the plan could not be saved: {}", st.message());
      out.path.clear();
    }
  }
  return out;
}

std::string DescribePagedOps(const PlanOutcome& outcome, const trace::Iteration& it, uint64_t capacity,
                             uint64_t device_bytes) {
  if (outcome.paged_ops == 0 || outcome.largest_op >= it.ops.size()) return {};
  const std::string others =
      outcome.paged_ops > 1 ? fmt::format(" (and {} more ops larger than the budget)", outcome.paged_ops - 1) : "";
  const std::string remedy =
      device_bytes == 0 || outcome.largest_op_bytes <= device_bytes
          ? fmt::format("KARMA_CAPACITY={} or more, or a smaller batch, avoids that",
                        FormatBytes(outcome.largest_op_bytes))
          : fmt::format("the device has {}: a smaller batch avoids that", FormatBytes(device_bytes));
  return fmt::format("op {} ({}) alone uses {}, more than the budget {}{}: no plan keeps its data on the device, so "
                     "it runs with demand paging in every iteration; {}",
                     outcome.largest_op, it.ops[outcome.largest_op].name, FormatBytes(outcome.largest_op_bytes),
                     FormatBytes(capacity), others, remedy);
}

std::string DescribeLateFrees(const PlanOutcome& outcome, uint64_t capacity) {
  if (outcome.late_freed_buffers == 0 || outcome.held_peak_bytes <= capacity) return {};
  return fmt::format("the application holds up to {} at once, more than the budget {}: {} buffers stay allocated "
                     "after the last use the plan counts (up to {} of them at once: buffers allocated in the "
                     "iteration and freed only in a later one), and KARMA moves nothing the application still "
                     "holds, so the device holds that beyond the plan ({} at its in-core peak); releasing tensors "
                     "as soon as they are no longer needed avoids it",
                     FormatBytes(outcome.held_peak_bytes), FormatBytes(capacity), outcome.late_freed_buffers,
                     FormatBytes(outcome.most_late_bytes), FormatBytes(outcome.incore_peak_bytes));
}

}  // namespace karma::rt
