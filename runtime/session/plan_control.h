// Planning control on the worker thread: a finished recording written as a trace and planned (or KARMA_PLAN read),
// programs handed to the executor, planning again for rejected recomputes and for the host link as measured, the
// trial of a plan made for the measured link, and the link record later runs read.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ground/common/live_stats.h"
#include "policy/hw_profile.h"
#include "runtime/base/config.h"
#include "runtime/base/cuda_api.h"
#include "runtime/base/worker.h"
#include "runtime/observe/observer.h"
#include "runtime/observe/recorder.h"
#include "runtime/plan/link_record.h"
#include "runtime/plan/planning.h"
#include "runtime/replay/executor.h"
#include "runtime/session/data_parallel_memory.h"
#include "runtime/session/device_memory.h"

namespace karma::rt {

class PlanControl {
 public:
  // `data_parallel`: which buffers the data-parallel shim homes on the host, for the planner.
  PlanControl(const SessionConfig& config, const CudaApi& api, Executor& executor, Worker& worker, Observer& observer,
              DeviceMemory& memory, const DataParallelMemory& data_parallel);
  PlanControl(const PlanControl&) = delete;
  PlanControl& operator=(const PlanControl&) = delete;
  void SetStats(live::Stats* stats) { stats_ = stats; }

  // On the worker after a recording: writes its trace (named by process `pid`), then plans it (or reads KARMA_PLAN)
  // unless KARMA_MODE=record.
  void WriteTrace(const std::shared_ptr<Recording>& rec, int64_t pid);
  // The executor has timed the plan's moves: logs the rates, and plans again with them where they depart from the
  // profile the plan assumed.
  void OnLinkMeasured();
  // The trial's plan is installed: CheckPlanTrial compares once it is timed.
  bool trial_ready() const { return trial_ready_.load(std::memory_order_relaxed); }
  // Once the plan a trial installed has timed iterations: keeps it, or goes back to the plan it replaced.
  void CheckPlanTrial();
  // Plans the last recording again on the worker (the ops of rejected recomputes left out), unless a given plan
  // runs (KARMA_MODE=replay) or a new plan is already waiting to start. With `trial`, the plan it installs is
  // then tried against the one running now (trial_).
  void PostReplan(bool trial = false);
  // Exiting: Planner II gives up (the heuristic plan stands).
  void StopPlanning() { stop_planning_.store(true); }

  std::string trace_path() const;
  std::string plan_path() const;
  // The last recording as the executor sees it (null before one).
  std::shared_ptr<const RecordedIteration> recorded() const;
  // The exit summary's end: the plan (or why there is none) and the trace (or why it was not written).
  std::string OutcomeLine() const;

 private:
  void SetState(live::State s) { stats_->state.store(static_cast<uint32_t>(s), std::memory_order_relaxed); }
  // Plans `rec` (or reads KARMA_PLAN), compiles and hands the program to the executor.
  void PlanAndInstall(const std::shared_ptr<const RecordedIteration>& rec, const std::vector<bool>& no_recompute);
  // No plan replays: logged, kept for the summary, and the session runs as um.
  void FailPlanning(const std::string& why);
  // KARMA_MODE=replay: KARMA_PLAN, if it was made for these inputs.
  void InstallGivenPlan(const RecordedIteration& rec, const policy::HwProfile& profile, uint64_t capacity,
                        const PlanFlags& flags);
  // Planner I (or a plan file made for the same inputs), then Planner II where it is clearly faster.
  void PlanAndInstallNew(const RecordedIteration& rec, const policy::HwProfile& profile, uint64_t capacity,
                         const PlanFlags& flags);
  // The log's notes on a new plan: ops larger than the budget and late frees (once per process), what was planned.
  void NotePlan(const PlanOutcome& outcome, const RecordedIteration& rec, const policy::HwProfile& profile,
                uint64_t capacity);
  // Compiles a plan and hands it to the executor, which runs it from the next iteration start.
  Status CompileAndInstall(const RecordedIteration& rec, const policy::Plan& plan, const std::string& path,
                           const policy::HwProfile& planned_with);
  void InstallProgram(std::shared_ptr<const ReplayProgram> program, const std::string& path,
                      const policy::HwProfile& planned_with);
  // The profile plans are made with: the device's (ProfileForDevice), with the host link's rates the executor
  // measured once they depart from it (link_).
  policy::HwProfile PlanningProfile();
  std::string DeviceName();
  // The first time a plan is made in KARMA_MODE=auto: takes the link rates an earlier run on this device recorded
  // (link_record.h) for link_, logged. Under mu_ for the members, with the file read before.
  void ReadLinkRecordOnce(const std::string& device);
  // Reads the link record (a new one where there is none or it is of another device), applies `update` and writes
  // it back, on the worker thread; a failure is logged once.
  void UpdateLinkRecord(std::function<void(LinkRecord*)> update);
  // `profile` (PlanningProfile) for planning `rec`, or the device's own profile where it carries the recorded link
  // rates and the record says the plan for them replayed slower for these inputs (then link_.settled).
  policy::HwProfile SettleRecordedLink(const RecordedIteration& rec, const policy::HwProfile& profile,
                                       uint64_t capacity, const PlanFlags& flags);

  const SessionConfig& config_;
  const CudaApi& api_;
  Executor& executor_;
  Worker& worker_;
  Observer& observer_;
  DeviceMemory& memory_;
  const DataParallelMemory& data_parallel_;
  live::Stats* stats_ = nullptr;
  std::atomic<bool> stop_planning_{false};  // exiting: Planner II gives up (the heuristic plan stands)
  bool paged_reported_ = false;  // the ops larger than the budget were named (once per process)
  bool late_reported_ = false;   // memory the application frees after its last use was named (once per process)

  mutable std::mutex mu_;
  std::string trace_path_;
  std::string trace_error_;
  std::shared_ptr<const RecordedIteration> recorded_;  // the last recording, kept for planning again
  std::string plan_path_;
  std::string plan_error_;
  std::atomic<bool> replanning_{false};
  // The host link's rates plans use. Under mu_.
  struct LinkState {
    double h2d_bw = 0, d2h_bw = 0;  // measured rates that plans use (0: the profile's)
    // The link record an earlier run left (link_record.h), read at the first plan of KARMA_MODE=auto: its rates are
    // h2d_bw, d2h_bw until this run measures its own. `settled`: the record said the plan for its rates replayed
    // slower for these inputs, so the first plan used the profile's figures and the same measurement plans nothing
    // new.
    bool record_read = false;
    bool settled = false;
    double recorded_h2d_bw = 0, recorded_d2h_bw = 0;
    std::vector<std::string> recorded_went_back;  // the record's went_back while its rates are used
  };
  LinkState link_;
  std::atomic<bool> link_record_warned_{false};
  std::string plan_key_;  // the key (PlanKey) of the plan installed last; under mu_
  policy::HwProfile planned_with_ = policy::DefaultProfile();  // the profile of the plan installed last; mu_
  std::atomic<uint64_t> installs_{0};  // programs handed to the executor
  // A plan made for the measured link, or Planner II's, replaces a plan that was replaying: it must replay no slower
  // than that one did (the simulator can rank two plans wrongly), else the session goes back to it. Under mu_.
  struct PlanTrial {
    bool active = false;
    Executor::ProgramTime before;  // the plan it replaced, timed
    std::string path;
    policy::HwProfile profile{};
    std::string key;      // the replaced plan's key
    std::string new_key;  // the key of the plan on trial made for the measured link, once installed
    std::string what;     // which plan is on trial, for the log
    // The replaced plan where the plan on trial was saved over its file (Planner II's, for the same inputs):
    // written back if the trial goes back to it, so that a later run reuses the faster plan.
    std::shared_ptr<const policy::Plan> overwritten;
  };
  // On the worker: the running program once it has the timed iterations to compare a trial with (kTrialIterations;
  // untimed when the process exits, the program changes or a minute passes first).
  Executor::ProgramTime TimedProgram();
  // On the worker, where no trial is on: a trial of the plan about to be installed (`what`, for the log) against the
  // one running, once that one is timed (TimedProgram). False when none began.
  bool BeginTrial(const char* what);
  PlanTrial trial_;
  std::atomic<bool> trial_ready_{false};  // the trial's plan is installed: compare once it is timed
};

}  // namespace karma::rt
