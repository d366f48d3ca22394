// Planning control: the trace of a recording, plans made and installed on the worker, planning again, the plan
// trial and the link record.
#include "runtime/session/plan_control.h"

#include <errno.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "ground/common/log.h"
#include "ground/trace/ktrace_io.h"
#include "policy/plan_io.h"

namespace karma::rt {
namespace {

// A plan on trial is judged on this many timed iterations, and given up for the plan it replaced when their median
// is more than kTrialSlower times that plan's. Planner II's trial waits for the plan it replaces to be timed over as
// many (TimedProgram: one iteration can be held back by what runs beside it, another rank planning on the same
// cores); the measured link's takes the iterations its moves were measured in.
constexpr uint32_t kTrialIterations = 3;
constexpr double kTrialSlower = 1.02;

}  // namespace

PlanControl::PlanControl(const SessionConfig& config, const CudaApi& api, Executor& executor, Worker& worker,
                         Observer& observer, DeviceMemory& memory, const DataParallelMemory& data_parallel)
    : config_(config), api_(api), executor_(executor), worker_(worker), observer_(observer), memory_(memory),
      data_parallel_(data_parallel) {}

// ---- the trace ----

void PlanControl::WriteTrace(const std::shared_ptr<Recording>& rec, int64_t pid) {
  try {
    if (api_.cudaSetDevice != nullptr) {
      LastErrorScope errors(api_);
      if (api_.cudaSetDevice(rec->device) != cudaSuccess) errors.Failed();
    }
    TraceContext ctx;
    ctx.model = program_invocation_short_name;
    ctx.source = fmt::format("libkarma {} recording of iteration {} ({}), pid {}", ModeName(config_.mode),
                             rec->iteration, rec->by_marker ? "marked" : "detected", pid);
    ctx.sites = &observer_.sites();
    auto it = FinishRecording(*rec, api_, ctx);
    Status st = it.status();
    std::string path;
    if (st.ok()) {
      auto p = TracePath(config_.trace_dir, program_invocation_short_name, pid);
      st = p.status();
      if (st.ok()) {
        path = *p;
        st = trace::WriteKtraceFile(it->it, path);
      }
    }
    std::shared_ptr<const RecordedIteration> recorded;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (st.ok()) {
        trace_path_ = path;
        KARMA_LOG(kInfo, "recorded iteration {} ({} ops, {} buffers) to {}", rec->iteration, it->it.ops.size(),
                  it->it.buffers.size(), path);
        if (rec->unused != 0) {
          KARMA_LOG(kInfo, "{} allocation{} the application held ({}) {} used by no op of the recorded iteration "
                    "(the largest, {}, allocated at {}): not in the plan",
                    rec->unused, rec->unused == 1 ? "" : "s", FormatBytes(rec->unused_bytes),
                    rec->unused == 1 ? "was" : "were",
                    FormatBytes(rec->largest_unused.size), observer_.sites().Describe(rec->largest_unused.site));
        }
        KARMA_LOG(kInfo, "recording took {:.2f} s of wall clock (the iteration before it {:.2f} s): probes {:.2f} s "
                  "({} hashed through pinned memory)", std::chrono::duration<double>(rec->t_end - rec->t0).count(),
                  static_cast<double>(rec->before_ns) / 1e9, static_cast<double>(rec->probe_ns.load()) / 1e9,
                  FormatBytes(rec->probe_bytes.load()));
      } else if (it.ok()) {
        trace_error_ = st.message();
        KARMA_LOG(kWarn, "the recorded iteration could not be written: {}", st.message());
      } else {
        trace_error_ = st.message();
        KARMA_LOG(kWarn, "the recorded iteration could not be turned into a trace: {}", st.message());
      }
      if (it.ok()) {
        recorded = std::make_shared<const RecordedIteration>(std::move(it).value());
        recorded_ = recorded;
      }
    }
    if (recorded != nullptr && config_.mode != Mode::kRecord) PlanAndInstall(recorded, {});
  } catch (...) {
    KARMA_LOG(kWarn, "the recorded iteration could not be written (internal error)");
  }
}

// ---- planning ----

void PlanControl::FailPlanning(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  plan_error_ = why;
  KARMA_LOG(kWarn, "no plan replayed, running as um: {}", why);
  SetState(live::State::kUm);
}

void PlanControl::PlanAndInstall(const std::shared_ptr<const RecordedIteration>& rec,
                                 const std::vector<bool>& no_recompute) {
  try {
    const PlanFlags flags{no_recompute, data_parallel_.HomedBuffers(*rec)};
    const uint64_t period = observer_.counter().period();
    if (!observer_.marker_mode() && rec->it.ops.size() != period) {
      FailPlanning(fmt::format("the recording kept {} of the iteration's {} ops", rec->it.ops.size(), period));
      return;
    }
    policy::HwProfile profile = PlanningProfile();
    uint64_t capacity = stats_->budget_bytes.load(std::memory_order_relaxed);
    // On the copy path the device holds whole chunks: the pool's size is the budget.
    if (CopyResidency* res = memory_.residency(); res != nullptr) capacity = AlignDown(capacity, res->granularity());
    // Pages no plan moves stay on the device throughout: the plan has the rest of the budget.
    if (const uint64_t unmovable = UnmovableBytes(rec->it, profile); unmovable != 0) {
      if (unmovable >= capacity) {
        FailPlanning(fmt::format("memory no plan can move ({}: the pages small buffers the application keeps "
                                 "share) fills the {} budget",
                                 FormatBytes(unmovable), FormatBytes(capacity)));
        return;
      }
      KARMA_LOG(kInfo, "{} of the {} budget stays on the device outside the plan (the pages small buffers the "
                "application keeps share): the plan has {}", FormatBytes(unmovable),
                FormatBytes(capacity), FormatBytes(capacity - unmovable));
      capacity -= unmovable;
    }
    if (config_.mode == Mode::kAuto) profile = SettleRecordedLink(*rec, profile, capacity, flags);
    if (config_.mode == Mode::kReplay) {
      InstallGivenPlan(*rec, profile, capacity, flags);
    } else {
      PlanAndInstallNew(*rec, profile, capacity, flags);
    }
  } catch (const std::exception& e) {
    FailPlanning(std::string("internal error while planning: ") + e.what());
  } catch (...) {
    FailPlanning("internal error while planning");
  }
}

void PlanControl::InstallGivenPlan(const RecordedIteration& rec, const policy::HwProfile& profile, uint64_t capacity,
                                   const PlanFlags& flags) {
  auto read = policy::ReadPlanFile(config_.plan_path);
  if (!read.ok()) {
    FailPlanning(read.status().message());
    return;
  }
  std::string key = PlanKey(PlanningIteration(rec.it, profile), profile, capacity, flags);
  // A plan made with the link rates another run measured names them.
  policy::HwProfile planned_with = profile;
  if (read->fingerprint != key && policy::ProfileFromLabel(profile, read->profile, &planned_with)) {
    key = PlanKey(PlanningIteration(rec.it, planned_with), planned_with, capacity, flags);
  }
  if (read->fingerprint != key) {
    FailPlanning(fmt::format("KARMA_PLAN={} was made for inputs {}, this run's are {} (another program, iteration, "
                             "device profile or capacity)", config_.plan_path, read->fingerprint, key));
    return;
  }
  if (Status st = CompileAndInstall(rec, *read, config_.plan_path, planned_with); !st.ok()) {
    FailPlanning(st.message());
  }
}

void PlanControl::PlanAndInstallNew(const RecordedIteration& rec, const policy::HwProfile& profile,
                                    uint64_t capacity, const PlanFlags& flags) {
  PlanRequest req;
  req.recorded = &rec;
  req.profile = profile;
  req.capacity = capacity;
  req.cache_dir = config_.trace_dir;
  req.flags = flags;
  req.cancel = &stop_planning_;
  auto outcome = MakeRuntimePlan(req);
  if (!outcome.ok()) {
    FailPlanning(outcome.status().message());
    return;
  }
  NotePlan(*outcome, rec, profile, capacity);
  if (const auto homed = std::count(flags.host_home.begin(), flags.host_home.end(), true); homed > 0) {
    // What leaves the device is the pages they own: the rest, shared in slabs, stays (UnmovableBytes).
    KARMA_LOG(kInfo, "data parallel: the plan keeps the {} buffers ({}) libkarma_mpi.so exchanges or updates on the "
              "host off the device between iterations ({} in pages of their own)", homed,
              FormatBytes(outcome->homed_bytes), FormatBytes(outcome->homed_owned_bytes));
  }
  if (Status st = CompileAndInstall(rec, outcome->plan, outcome->path, profile); !st.ok()) {
    FailPlanning(st.message());
    return;
  }
  // Planner II improves on the plan now running, off the application's threads; a saved plan already had it. A
  // new plan costs an iteration that validates its recomputes again: it must be clearly faster.
  if (!config_.ilp || outcome->reused || outcome->plan.actions.empty()) return;
  constexpr double kClearlyFaster = 0.95;
  req.ilp = true;
  req.improve_on_s = kClearlyFaster * outcome->simulated_s;
  auto better = MakeRuntimePlan(req);
  if (!better.ok() || !better->improves) {
    KARMA_LOG(kInfo, "planner II found no plan {:.0f}% faster{}", 100 * (1 - kClearlyFaster),
              better.ok() ? "" : ": " + better.status().message());
    return;
  }
  // On trial against the first plan (unless a trial of a plan for the measured link judges both).
  const bool trial = BeginTrial("planner II's plan");
  if (Status st = CompileAndInstall(rec, better->plan, better->path, profile); !st.ok()) {
    KARMA_LOG(kWarn, "planner II's plan cannot be replayed ({}); the first plan stays", st.message());
    if (trial) {
      std::lock_guard<std::mutex> lock(mu_);
      trial_.active = false;
    }
    return;
  }
  KARMA_LOG(kInfo, "planner II: {:.2f} ms simulated ({}) replaces the first plan from the next iteration; plan {}",
            better->simulated_s * 1e3, better->plan.note, better->path.empty() ? "not saved" : better->path);
  if (trial) {
    if (!better->path.empty() && better->path == outcome->path) {
      std::lock_guard<std::mutex> lock(mu_);
      trial_.overwritten = std::make_shared<const policy::Plan>(outcome->plan);
    }
    trial_ready_.store(true, std::memory_order_release);
  }
}

bool PlanControl::BeginTrial(const char* what) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (trial_.active) return false;
  }
  const Executor::ProgramTime before = TimedProgram();
  std::lock_guard<std::mutex> lock(mu_);
  // Another trial may have begun meanwhile: it stays.
  if (before.program == nullptr || before.iterations == 0 || trial_.active) return false;
  trial_ = PlanTrial{true, before, plan_path_, planned_with_, plan_key_, {}, what, nullptr};
  return true;
}

Executor::ProgramTime PlanControl::TimedProgram() {
  const uint64_t installed = installs_.load(std::memory_order_relaxed);
  for (int waited_ms = 0; waited_ms < 60000 && !stop_planning_.load(std::memory_order_relaxed); waited_ms += 10) {
    if (installs_.load(std::memory_order_relaxed) != installed) break;
    // The program installed last, once it runs (the one before it may still, until an iteration start).
    if (const Executor::ProgramTime now = executor_.program_time();
        !executor_.pending() && now.iterations >= kTrialIterations) {
      return now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return {};
}

void PlanControl::NotePlan(const PlanOutcome& outcome, const RecordedIteration& rec, const policy::HwProfile& profile,
                           uint64_t capacity) {
  const uint64_t device_bytes = stats_->device_total_bytes.load(std::memory_order_relaxed);
  if (const std::string paged = DescribePagedOps(outcome, rec.it, capacity, device_bytes);
      !paged.empty() && !paged_reported_) {
    KARMA_LOG(kWarn, "{}", paged);
    paged_reported_ = true;
  }
  if (const std::string late = DescribeLateFrees(outcome, capacity); !late.empty() && !late_reported_) {
    KARMA_LOG(kWarn, "{}", late);
    late_reported_ = true;
  }
  if (outcome.reused) {
    KARMA_LOG(kInfo, "reusing the plan {} made for the same inputs", outcome.path);
    return;
  }
  // The in-core peak tells a plan that fits from a recording that missed memory (on an H100, ResNet-50 under
  // cudaMallocAsync planned "fits in core" for 1.91 GiB with 3.02 GiB allocated at the run's peak).
  KARMA_LOG(kInfo, "planned on {} for {}: {:.2f} ms simulated, {:.2f} ms in core ({}; {} at the in-core peak, "
            "{} held at once while it was recorded); plan {}", policy::ProfileLabel(profile),
            FormatBytes(capacity), outcome.simulated_s * 1e3, outcome.incore_s * 1e3, outcome.plan.note,
            FormatBytes(outcome.incore_peak_bytes), FormatBytes(observer_.held_peak()),
            outcome.path.empty() ? "not saved" : outcome.path);
}

Status PlanControl::CompileAndInstall(const RecordedIteration& rec, const policy::Plan& plan, const std::string& path,
                                      const policy::HwProfile& planned_with) {
  auto program = CompileProgram(rec, plan, planned_with);
  KARMA_RETURN_IF_ERROR(program.status());
  {
    std::lock_guard<std::mutex> lock(mu_);
    plan_key_ = plan.fingerprint;
  }
  InstallProgram(std::move(program).value(), path, planned_with);
  return Status::Ok();
}

void PlanControl::InstallProgram(std::shared_ptr<const ReplayProgram> program, const std::string& path,
                                 const policy::HwProfile& planned_with) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    plan_path_ = path;
    plan_error_.clear();
    planned_with_ = planned_with;
  }
  int device = 0;
  if (api_.cudaGetDevice != nullptr) {
    LastErrorScope errors(api_);
    if (api_.cudaGetDevice(&device) != cudaSuccess) errors.Failed();
  }
  // With markers the program starts at the next one (OnMarker sets the base); until then nothing is replayed.
  const IterationCounter& counter = observer_.counter();
  const uint64_t base = observer_.marker_mode() ? UINT64_MAX : counter.boundary() - counter.period();
  executor_.Install(std::move(program), base, device, counter.ops());
  installs_.fetch_add(1, std::memory_order_relaxed);
  SetState(live::State::kReplaying);
}

void PlanControl::PostReplan(bool trial) {
  std::shared_ptr<const RecordedIteration> rec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rec = recorded_;
  }
  if (rec == nullptr || config_.mode == Mode::kReplay) return;  // a given plan is not replaced
  if (replanning_.exchange(true)) return;  // the plan not yet started will see every rejection and rate so far
  auto task = [this, rec, trial] {
    replanning_.store(false);
    // The plan running when the link was measured may not have been timed yet (it had just replaced another), or
    // another has been installed since (Planner II's, planned before this task ran): the trial then times the plan
    // running now (TimedProgram), which the new one must beat.
    if (trial) {
      const bool pending = executor_.pending();
      const uint64_t serial = executor_.program_time().serial;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (pending || trial_.before.serial != serial) trial_.active = false;
      }
      BeginTrial("the plan made for the measured link");
    }
    const uint64_t installed = installs_.load(std::memory_order_relaxed);
    PlanAndInstall(rec, executor_.rejected_ops());
    if (!trial) return;
    if (installs_.load(std::memory_order_relaxed) != installed) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        trial_.new_key = plan_key_;
      }
      trial_ready_.store(true, std::memory_order_release);
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      trial_.active = false;
    }
  };
  if (!worker_.Post(task)) replanning_.store(false);
}

// ---- the host link ----

std::string PlanControl::DeviceName() {
  if (api_.cudaGetDeviceProperties == nullptr) return {};
  cudaDeviceProp prop{};
  int device = 0;
  LastErrorScope errors(api_);
  if ((api_.cudaGetDevice != nullptr && api_.cudaGetDevice(&device) != cudaSuccess) ||
      api_.cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    errors.Failed();
    return {};
  }
  return prop.name;
}

policy::HwProfile PlanControl::PlanningProfile() {
  memory_.EnsureDeviceInfo();
  const std::string name = DeviceName();
  const policy::HwProfile& device = ProfileForDevice(name);
  if (memory_.residency() != nullptr) {
    // The copy path moves at the copy engines' rates; the link trial measures managed memory's only.
    policy::HwProfile copy = device;
    copy.moves = policy::MovePath::kCopy;
    return copy;
  }
  if (config_.mode == Mode::kAuto) ReadLinkRecordOnce(name);
  std::lock_guard<std::mutex> lock(mu_);
  return policy::WithLink(device, policy::RoundedRate(link_.h2d_bw), policy::RoundedRate(link_.d2h_bw));
}

void PlanControl::ReadLinkRecordOnce(const std::string& device) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (link_.record_read) return;
    link_.record_read = true;
  }
  if (config_.trace_dir.empty()) return;
  const std::string path = LinkRecordPath(config_.trace_dir, device);
  auto r = ReadLinkRecord(path);
  if (!r.ok()) {
    if (r.status().code() != Code::kNotFound) {
      KARMA_LOG(kWarn, "{}; planning with the profile's link rates", r.status().message());
    }
    return;
  }
  if (r->device != device) {
    KARMA_LOG(kInfo, "{} was measured on a {}, not on this {}: not used", path, r->device, device);
    return;
  }
  const policy::HwProfile& profile = ProfileForDevice(device);
  // Rates close to the profile's change nothing: this run would not plan again for them either.
  if (!LinkDeparts(profile, r->h2d_bw, r->d2h_bw)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (link_.h2d_bw > 0 || link_.d2h_bw > 0) return;  // this run has measured its own
  link_.h2d_bw = link_.recorded_h2d_bw = r->h2d_bw;
  link_.d2h_bw = link_.recorded_d2h_bw = r->d2h_bw;
  link_.recorded_went_back = std::move(r->went_back);
  KARMA_LOG(kInfo, "planning with the host link an earlier run measured on this device: {:.3g} GB/s to the device, "
            "{:.3g} GB/s to the host ({}; the profile says {:.3g} and {:.3g})", r->h2d_bw / 1e9, r->d2h_bw / 1e9,
            path, profile.h2d_bw() / 1e9, profile.d2h_bw() / 1e9);
}

policy::HwProfile PlanControl::SettleRecordedLink(const RecordedIteration& rec, const policy::HwProfile& profile,
                                                  uint64_t capacity, const PlanFlags& flags) {
  std::vector<std::string> went_back;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (link_.recorded_went_back.empty() || link_.h2d_bw != link_.recorded_h2d_bw ||
        link_.d2h_bw != link_.recorded_d2h_bw) {
      return profile;
    }
    went_back = link_.recorded_went_back;
  }
  const std::string key = PlanKey(PlanningIteration(rec.it, profile), profile, capacity, flags);
  if (std::find(went_back.begin(), went_back.end(), key) == went_back.end()) return profile;
  const policy::HwProfile& device = ProfileForDevice(DeviceName());
  KARMA_LOG(kInfo, "an earlier run's plan for the link it measured ({}) replayed slower than the plan it replaced: "
            "planning on {}", policy::ProfileLabel(profile), policy::ProfileLabel(device));
  std::lock_guard<std::mutex> lock(mu_);
  link_.h2d_bw = link_.d2h_bw = 0;
  link_.recorded_went_back.clear();
  link_.settled = true;
  return device;
}

void PlanControl::UpdateLinkRecord(std::function<void(LinkRecord*)> update) {
  if (config_.trace_dir.empty()) return;
  auto task = [this, update = std::move(update)] {
    struct stat st {};
    if (::stat(config_.trace_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;  // nothing recorded here
    const std::string device = DeviceName();
    const std::string path = LinkRecordPath(config_.trace_dir, device);
    LinkRecord r;
    if (auto read = ReadLinkRecord(path); read.ok() && read->device == device) r = std::move(read).value();
    r.device = device;
    update(&r);
    if (r.h2d_bw <= 0 && r.d2h_bw <= 0) return;
    if (Status st = WriteLinkRecord(path, r); !st.ok() && !link_record_warned_.exchange(true)) {
      KARMA_LOG(kWarn, "the measured link rates were not saved for later runs: {}", st.message());
    }
  };
  worker_.Post(task);
}

void PlanControl::OnLinkMeasured() {
  const Executor::LinkRates l = executor_.link_rates();
  policy::HwProfile assumed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    assumed = planned_with_;
  }
  auto rate = [](double bw, uint64_t bytes) {
    return bw > 0 ? fmt::format("{:.3g} GB/s ({})", bw / 1e9, FormatBytes(bytes)) : std::string("not measured");
  };
  bool replan = LinkDeparts(assumed, l.h2d_bw, l.d2h_bw) && config_.mode != Mode::kReplay;
  bool settled = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    settled = replan && link_.settled &&
              !LinkDeparts(policy::WithLink(assumed, link_.recorded_h2d_bw, link_.recorded_d2h_bw), l.h2d_bw,
                           l.d2h_bw);
  }
  replan = replan && !settled;
  KARMA_LOG(kInfo, "the plan's moves ran at {} to the device and {} to the host over {} iterations; the plan assumed "
            "{:.3g} and {:.3g} GB/s ({}){}", rate(l.h2d_bw, l.h2d_bytes), rate(l.d2h_bw, l.d2h_bytes), l.iterations,
            assumed.h2d_bw() / 1e9, assumed.d2h_bw() / 1e9, policy::ProfileLabel(assumed),
            replan    ? ": planning again with the measured rates"
            : settled ? ": an earlier run's plan for these rates replayed slower than the plan running, which stays"
                      : "");
  if (!replan) return;
  // The rates a new plan is made with are the ones later runs start from; a measurement within the margin of the
  // plan's own leaves the record as it is (a plan key names its rates, and later runs reuse that plan).
  UpdateLinkRecord([h2d = policy::RoundedRate(l.h2d_bw), d2h = policy::RoundedRate(l.d2h_bw)](LinkRecord* r) {
    if (h2d > 0) r->h2d_bw = h2d;
    if (d2h > 0) r->d2h_bw = d2h;
  });
  // The plan replaying now, timed in the iterations just measured, is what the new one must beat.
  const Executor::ProgramTime before = executor_.program_time();
  {
    std::lock_guard<std::mutex> lock(mu_);
    link_.h2d_bw = l.h2d_bw;
    link_.d2h_bw = l.d2h_bw;
    link_.recorded_went_back.clear();
    trial_ = PlanTrial{before.program != nullptr && before.iterations > 0, before, plan_path_, planned_with_,
                       plan_key_, {}, "the plan made for the measured link", nullptr};
  }
  PostReplan(true);
}

void PlanControl::CheckPlanTrial() {
  const Executor::ProgramTime now = executor_.program_time();
  PlanTrial t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    t = trial_;
  }
  if (!t.active) {
    trial_ready_.store(false);
    return;
  }
  // The new plan starts at the next iteration start and is judged on its own timed iterations.
  if (now.serial == t.before.serial || now.iterations < kTrialIterations) return;
  trial_ready_.store(false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    trial_.active = false;
  }
  const bool back = now.median_ns > kTrialSlower * t.before.median_ns;
  KARMA_LOG(kInfo, "{} replays at {:.2f} ms per iteration, the plan it replaced at {:.2f} ms: {}", t.what,
            now.median_ns / 1e6, t.before.median_ns / 1e6,
            back ? "going back to that plan" : "keeping it");
  if (!t.new_key.empty()) {
    UpdateLinkRecord([key = t.new_key, back](LinkRecord* r) { MarkWentBack(r, key, back); });
  }
  if (!back) return;
  auto task = [this, t] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      plan_key_ = t.key;
    }
    if (t.overwritten != nullptr) {
      if (Status st = policy::WritePlanFile(t.path, *t.overwritten); !st.ok()) {
        KARMA_LOG(kWarn, "the plan gone back to could not be saved again: {}", st.message());
      }
    }
    InstallProgram(t.before.program, t.path, t.profile);
  };
  worker_.Post(task);
}

// ---- what the summary and the tests read ----

std::shared_ptr<const RecordedIteration> PlanControl::recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recorded_;
}

std::string PlanControl::trace_path() const {
  std::lock_guard<std::mutex> lock(mu_);
  return trace_path_;
}

std::string PlanControl::plan_path() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plan_path_;
}

std::string PlanControl::OutcomeLine() const {
  std::string line;
  std::lock_guard<std::mutex> lock(mu_);
  if (!plan_path_.empty()) {
    line += "; plan " + plan_path_;
  } else if (!plan_error_.empty()) {
    line += "; no plan: " + plan_error_;
  }
  if (!trace_path_.empty()) {
    line += "; trace " + trace_path_;
  } else if (!trace_error_.empty()) {
    line += "; trace not written: " + trace_error_;
  } else if (config_.mode == Mode::kAuto || config_.mode == Mode::kRecord) {
    line += "; no iteration recorded";
  }
  return line;
}

}  // namespace karma::rt
