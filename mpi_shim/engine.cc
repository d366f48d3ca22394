// The data-parallel engine: rounds and plans on the application thread, reductions on the communication
// thread, host updates on the update thread, and a watchdog over the collective in flight.
#include "mpi_shim/engine.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>

#include "mpi_shim/host_optimizer/host_optimizer.h"
#include "ground/common/env.h"
#include "ground/common/log.h"

namespace karma::dp {

struct Engine::CommEntry {
  MPI_Comm app = nullptr;
  MPI_Comm dup = nullptr;  // only the communication thread uses it, so its collectives never mix with the app's
  int id = 0;
  int rank = 0, size = 1;
};

struct Engine::Call {
  const void* send = nullptr;  // null: in place (the data is in recv)
  void* recv = nullptr;
  int count = 0;
  MPI_Datatype type = nullptr;
  MPI_Op op = nullptr;
  const CommEntry* comm = nullptr;
  MPI_Comm dup = nullptr;  // the entry's duplicate when the call was made (the entry's may be freed since)
  int comm_rank = 0, comm_size = 1;
  size_t elem = 0;
  uint64_t bytes = 0;
  bool blocking = false;
  MPI_Request request = nullptr;  // the generalized request the application holds (non-blocking calls)
  int device = 0;
  uint64_t round = 0;
  int index = 0;
  double issued = 0;
  uint64_t group = 0;
  // Set by the communication thread: the tensor whose gradient this is, in an attached optimizer.
  hostopt::HostOptimizer* opt = nullptr;
  hostopt::TensorRef tensor;
  hostopt::TensorState arrays;
  bool done = false;  // under mu_
};

struct Engine::Group {
  uint64_t id = 0;
  uint64_t round = 0;
  bool planned = false;
  std::vector<CallPtr> calls;
  GroupRecord record;
};

// Rounds that begin with the same call: profiled, then planned once.
struct Engine::Kind {
  enum State { kProfiling, kComputing, kReady } state = kProfiling;
  int rounds_seen = 0;
  std::vector<Signature> sigs;
  std::vector<int> group_ends;
};

struct Engine::Task {
  enum Type { kGroup, kPlan, kFreeComm } type = kGroup;
  GroupPtr group;
  Kind* kind = nullptr;
  uint64_t round = 0;
  std::vector<Signature> sigs;
  std::vector<PlanCall> calls;
  MPI_Comm comm = nullptr;  // kPlan: where the timings are exchanged
  MPI_Comm to_free = nullptr;
};

namespace {

std::atomic<Engine*> g_active{nullptr};
std::atomic<Engine*> g_last{nullptr};

// Optimizers attached for host updates: kept outside the engine so they can be attached before MPI_Init.
std::mutex g_opt_mu;
std::vector<hostopt::HostOptimizer*> g_optimizers;

std::string Describe(int rank, int size) { return fmt::format("karma-mpi: rank {} of {}", rank, size); }

// A generalized request's status: what MPI reports for a completed collective (an empty status).
int QueryRequest(void* extra, MPI_Status* status) {
  const MpiApi& api = *static_cast<const MpiApi*>(extra);
  api.Status_set_elements(status, api.type_float, 0);
  api.Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_ANY_SOURCE;
  status->MPI_TAG = MPI_ANY_TAG;
  status->MPI_ERROR = MPI_SUCCESS;
  return MPI_SUCCESS;
}
int FreeRequest(void*) { return MPI_SUCCESS; }
int CancelRequest(void*, int) { return MPI_SUCCESS; }  // a collective cannot be cancelled; MPI says so too

// The duplicate is the shim's own; the application's copy of a communicator gets its own on first use.
int CopyAttribute(MPI_Comm, int, void*, void*, void*, int* flag) {
  *flag = 0;
  return MPI_SUCCESS;
}
int DeleteAttribute(MPI_Comm, int, void* value, void* extra) {
  static_cast<Engine*>(extra)->OnCommFreed(value);
  return MPI_SUCCESS;
}

}  // namespace

EngineOptions EngineOptionsFromEnvironment(std::vector<std::string>* problems) {
  const EnvConfig env = EnvConfig::FromProcessEnvironment();
  for (const std::string& p : env.problems()) {
    if (p.find("KARMA_MPI") != std::string::npos) problems->push_back(p);
  }
  LogLevel level;
  if (ParseLogLevel(env.text(EnvVar::KARMA_LOG), &level)) SetLogLevel(level);
  EngineOptions o;
  o.enabled = env.flag(EnvVar::KARMA_MPI);
  o.prefetch = env.flag(EnvVar::KARMA_MPI_PREFETCH);
  o.timeline = env.text(EnvVar::KARMA_MPI_TIMELINE);
  const int64_t timeout = env.integer(EnvVar::KARMA_MPI_TIMEOUT);
  if (timeout < 0 || timeout > 1000000) {
    problems->push_back(fmt::format("KARMA_MPI_TIMEOUT={} is out of range (0 to 1000000 seconds); using 300", timeout));
  } else {
    o.timeout_s = static_cast<int>(timeout);
  }
  if (const std::string& cost = env.text(EnvVar::KARMA_MPI_COST); !cost.empty()) {
    auto parsed = ParseCostModel(cost);
    if (parsed.ok()) {
      o.cost_given = true;
      o.cost = *parsed;
    } else {
      problems->push_back("KARMA_MPI_COST: " + parsed.status().message() + "; measuring instead");
    }
  }
  return o;
}

// ---- start and stop ----------------------------------------------------------------------------------------

Engine::Engine(const MpiApi& api, const EngineOptions& options)
    : api_(api), options_(options), memory_(options.prefetch) {}

int Engine::Init(const MpiApi& api, int* argc, char*** argv, int required, int* provided) {
  std::vector<std::string> problems;
  const EngineOptions options = EngineOptionsFromEnvironment(&problems);
  for (const std::string& p : problems) KARMA_LOG(kWarn, "karma-mpi: {}", p);
  if (!options.enabled) {
    return required < 0 ? api.Init(argc, argv) : api.Init_thread(argc, argv, required, provided);
  }
  int got = MPI_THREAD_SINGLE;
  const int rc = api.Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &got);
  if (rc != MPI_SUCCESS) return rc;
  if (provided) *provided = got;
  if (got < MPI_THREAD_MULTIPLE) {
    KARMA_LOG(kWarn,
              "karma-mpi: the MPI library provides thread level {} only; the shim needs MPI_THREAD_MULTIPLE (its "
              "communication thread calls MPI while the application does) and passes every call through",
              got);
    return MPI_SUCCESS;
  }
  auto* engine = new Engine(api, options);  // lives as long as the process: threads and callbacks may hold it
  if (engine->Start() != MPI_SUCCESS) {
    KARMA_LOG(kWarn, "karma-mpi: could not set up the shim's communicator; passing every call through");
    return MPI_SUCCESS;
  }
  g_last.store(engine);
  g_active.store(engine);
  return MPI_SUCCESS;
}

Engine* Engine::Active() { return g_active.load(std::memory_order_acquire); }
Engine* Engine::Last() { return g_last.load(std::memory_order_acquire); }

int Engine::Start() {
  int rc = api_.Comm_dup(api_.comm_world, &world_dup_);
  if (rc != MPI_SUCCESS) return rc;
  api_.Comm_set_errhandler(world_dup_, api_.errors_return);
  api_.Comm_rank(world_dup_, &rank_);
  api_.Comm_size(world_dup_, &size_);
  rc = api_.Comm_create_keyval(CopyAttribute, DeleteAttribute, &keyval_, this);
  if (rc != MPI_SUCCESS) return rc;
  auto world = std::make_unique<CommEntry>();
  world->app = api_.comm_world;
  world->dup = world_dup_;
  world->rank = rank_;
  world->size = size_;
  rc = api_.Comm_set_attr(api_.comm_world, keyval_, world.get());
  if (rc != MPI_SUCCESS) return rc;
  comms_.push_back(std::move(world));
  comm_thread_ = std::thread([this] { CommLoop(); });
  update_thread_ = std::thread([this] { UpdateLoop(); });
  watchdog_thread_ = std::thread([this] { WatchdogLoop(); });
  return MPI_SUCCESS;
}

int Engine::Finalize() {
  {
    std::unique_lock lock(mu_);
    DrainLocked();
    stopping_ = true;
  }
  queue_cv_.notify_all();
  plan_cv_.notify_all();
  comm_thread_.join();
  {
    std::lock_guard lock(update_mu_);
    update_stop_ = true;
  }
  update_cv_.notify_all();
  update_thread_.join();
  {
    std::lock_guard lock(watch_mu_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  watchdog_thread_.join();
  {
    std::lock_guard lock(mu_);
    finalized_ = true;
  }
  g_active.store(nullptr, std::memory_order_release);
  if (!options_.timeline.empty()) {
    const std::string path = TimelinePath(options_.timeline, rank_);
    const Status st = timeline_.Write(path, rank_, size_);
    if (!st.ok()) KARMA_LOG(kWarn, "{}: timeline: {}", Describe(rank_, size_), st.message());
  }
  for (auto& c : comms_) {
    if (c->dup != nullptr) api_.Comm_free(&c->dup);
  }
  return api_.Finalize();
}

void Engine::OnCommFreed(void* value) {
  auto* entry = static_cast<CommEntry*>(value);
  std::unique_lock lock(mu_);
  if (stopping_ || finalized_ || entry->dup == nullptr) return;
  // Calls already queued on the duplicate run first; MPI lets a communicator be freed with work pending.
  DrainLocked();
  Task t;
  t.type = Task::kFreeComm;
  t.to_free = entry->dup;
  entry->dup = nullptr;
  Enqueue(std::move(t));
}

// ---- the application side ------------------------------------------------------------------------------------

const Engine::CommEntry* Engine::EntryFor(MPI_Comm comm) {
  void* value = nullptr;
  int flag = 0;
  if (api_.Comm_get_attr(comm, keyval_, &value, &flag) != MPI_SUCCESS) return nullptr;
  if (flag) {
    auto* entry = static_cast<const CommEntry*>(value);
    return entry->dup != nullptr ? entry : nullptr;
  }
  int inter = 0;
  if (api_.Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return nullptr;
  // First use of this communicator: every rank is in this same call, so the duplication (a collective) matches.
  auto entry = std::make_unique<CommEntry>();
  entry->app = comm;
  if (api_.Comm_dup(comm, &entry->dup) != MPI_SUCCESS) return nullptr;
  api_.Comm_set_errhandler(entry->dup, api_.errors_return);
  api_.Comm_rank(entry->dup, &entry->rank);
  api_.Comm_size(entry->dup, &entry->size);
  if (api_.Comm_set_attr(comm, keyval_, entry.get()) != MPI_SUCCESS) {
    api_.Comm_free(&entry->dup);
    return nullptr;
  }
  std::lock_guard lock(mu_);
  entry->id = static_cast<int>(comms_.size());
  comms_.push_back(std::move(entry));
  return comms_.back().get();
}

Engine::CallPtr Engine::NewCall(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                                MPI_Comm comm, bool blocking) {
  if (count < 0 || (count > 0 && recvbuf == nullptr)) return nullptr;  // MPI reports the error
  int size = 0;
  MPI_Aint lb = 0, extent = 0;
  if (api_.Type_size(type, &size) != MPI_SUCCESS || api_.Type_get_extent(type, &lb, &extent) != MPI_SUCCESS) {
    return nullptr;
  }
  // Packing several calls into one buffer needs plain contiguous elements.
  if (size <= 0 || lb != 0 || extent != size) return nullptr;
  const CommEntry* entry = EntryFor(comm);
  if (entry == nullptr) return nullptr;
  auto call = std::make_shared<Call>();
  call->send = sendbuf == MPI_IN_PLACE || sendbuf == recvbuf ? nullptr : sendbuf;
  call->recv = recvbuf;
  call->count = count;
  call->type = type;
  call->op = op;
  call->comm = entry;
  call->dup = entry->dup;
  call->comm_rank = entry->rank;
  call->comm_size = entry->size;
  call->elem = static_cast<size_t>(size);
  call->bytes = static_cast<uint64_t>(count) * static_cast<uint64_t>(size);
  call->blocking = blocking;
  call->device = memory_.CurrentDevice();
  return call;
}

void Engine::StartRound(const CallPtr& call, std::unique_lock<std::mutex>& lock) {
  const Signature sig{call->comm->id, call->count, call->type, call->op, call->blocking};
  auto& kind = kinds_[sig];
  if (!kind) kind = std::make_unique<Kind>();
  kind_ = kind.get();
  // The plan of the previous round of this kind is being computed: every rank waits for it here, so that every
  // rank switches to it at the same round.
  plan_cv_.wait(lock, [&] { return kind_->state != Kind::kComputing || stopping_; });
  following_plan_ = kind_->state == Kind::kReady;
  profiling_ = !following_plan_ && ++kind_->rounds_seen == options_.profile_round;
  deviated_ = false;
  plan_group_ = 0;
  ++round_;
  round_open_ = true;
  round_start_ = MonotonicSeconds();
  round_sigs_.clear();
  round_calls_.clear();
  round_classes_.clear();
  stat_rounds_.fetch_add(1, std::memory_order_relaxed);
  if (following_plan_) stat_planned_.fetch_add(1, std::memory_order_relaxed);
}

void Engine::Submit(const CallPtr& call, std::unique_lock<std::mutex>& lock) {
  if (!round_open_) StartRound(call, lock);
  const Signature sig{call->comm->id, call->count, call->type, call->op, call->blocking};
  call->round = round_;
  call->index = static_cast<int>(round_sigs_.size());
  call->issued = MonotonicSeconds();
  round_sigs_.push_back(sig);
  PlanCall pc;
  pc.bytes = call->bytes;
  pc.ready_s = call->issued - round_start_;
  // Calls on one communicator with one type and op can share a buffer.
  pc.merge_class = round_classes_.try_emplace({call->comm->id, call->type, call->op}, round_classes_.size())
                       .first->second;
  pc.ends_group = call->blocking;
  round_calls_.push_back(pc);
  if (call->request != nullptr) pending_[call->request] = call;
  stat_calls_.fetch_add(1, std::memory_order_relaxed);

  if (following_plan_) {
    const size_t i = static_cast<size_t>(call->index);
    if (i >= kind_->sigs.size() || kind_->sigs[i] != sig) {
      // Not the round the plan was made for: the rest goes call by call, and this kind is profiled again.
      following_plan_ = false;
      deviated_ = true;
      CloseOpenGroup();
    }
  }
  if (!open_) {
    open_ = std::make_shared<Group>();
    open_->id = next_group_++;
    open_->round = round_;
    open_->planned = following_plan_;
  }
  call->group = open_->id;
  open_->calls.push_back(call);
  if (!following_plan_) {
    CloseOpenGroup();
  } else if (call->index == kind_->group_ends[plan_group_]) {
    CloseOpenGroup();
    ++plan_group_;
  }
  if (static_cast<int>(round_sigs_.size()) >= options_.max_round_calls) capped_ = true;
  if (call->blocking || capped_) DrainLocked();
}

void Engine::CloseOpenGroup() {
  if (!open_) return;
  open_->record.closed = MonotonicSeconds();
  Task t;
  t.type = Task::kGroup;
  t.group = std::move(open_);
  open_.reset();
  Enqueue(std::move(t));
}

void Engine::DrainLocked() {
  CloseOpenGroup();
  if (!round_open_) return;
  round_open_ = false;
  if (following_plan_ && round_sigs_.size() != kind_->sigs.size()) deviated_ = true;
  if (capped_) {
    capped_ = false;
    if (kind_->state == Kind::kProfiling) --kind_->rounds_seen;  // never the round a plan is made from
  } else if (deviated_) {
    kind_->state = Kind::kProfiling;
    kind_->rounds_seen = options_.profile_round - 1;
  } else if (profiling_ && kind_->state == Kind::kProfiling) {
    kind_->state = Kind::kComputing;
    Task t;
    t.type = Task::kPlan;
    t.kind = kind_;
    t.round = round_;
    t.sigs = round_sigs_;
    t.calls = round_calls_;
    t.comm = comms_[static_cast<size_t>(std::get<0>(round_sigs_.front()))]->dup;
    Enqueue(std::move(t));
  }
}

void Engine::Drain() {
  std::lock_guard lock(mu_);
  DrainLocked();
}

void Engine::Enqueue(Task task) {
  queue_.push_back(std::move(task));
  queue_cv_.notify_one();
}

Engine::CallPtr Engine::PendingCall(MPI_Request request) {
  auto it = pending_.find(request);
  return it == pending_.end() ? nullptr : it->second;
}

void Engine::WaitCalls(std::vector<CallPtr> calls) {
  if (calls.empty()) return;
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] {
    return std::all_of(calls.begin(), calls.end(), [](const CallPtr& c) { return c->done; });
  });
}

int Engine::Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  CallPtr call = NewCall(sendbuf, recvbuf, count, type, op, comm, true);
  if (!call) return api_.Allreduce(sendbuf, recvbuf, count, type, op, comm);
  {
    std::unique_lock lock(mu_);
    Submit(call, lock);
  }
  WaitCalls({call});
  return MPI_SUCCESS;
}

int Engine::Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                       MPI_Request* request) {
  CallPtr call = NewCall(sendbuf, recvbuf, count, type, op, comm, false);
  if (!call || request == nullptr) return api_.Iallreduce(sendbuf, recvbuf, count, type, op, comm, request);
  const int rc = api_.Grequest_start(QueryRequest, FreeRequest, CancelRequest, &api_, request);
  if (rc != MPI_SUCCESS) return rc;
  call->request = *request;
  std::unique_lock lock(mu_);
  Submit(call, lock);
  return MPI_SUCCESS;
}

int Engine::Wait(MPI_Request* request, MPI_Status* status) {
  std::vector<CallPtr> mine;
  {
    std::lock_guard lock(mu_);
    DrainLocked();
    if (request != nullptr) {
      if (CallPtr c = PendingCall(*request)) mine.push_back(c);
    }
  }
  WaitCalls(std::move(mine));
  return api_.Wait(request, status);
}

int Engine::Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  std::vector<CallPtr> mine;
  {
    std::lock_guard lock(mu_);
    DrainLocked();
    for (int i = 0; requests != nullptr && i < count; ++i) {
      if (CallPtr c = PendingCall(requests[i])) mine.push_back(c);
    }
  }
  WaitCalls(std::move(mine));
  return api_.Waitall(count, requests, statuses);
}

void Engine::FlushIfOpen(int count, const MPI_Request* requests) {
  std::lock_guard lock(mu_);
  if (!open_ || requests == nullptr) return;
  for (int i = 0; i < count; ++i) {
    for (const CallPtr& c : open_->calls) {
      if (c->request == requests[i]) {
        CloseOpenGroup();
        return;
      }
    }
  }
}

int Engine::Test(MPI_Request* request, int* flag, MPI_Status* status) {
  FlushIfOpen(1, request);
  return api_.Test(request, flag, status);
}

int Engine::Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  FlushIfOpen(count, requests);
  return api_.Testall(count, requests, flag, statuses);
}

int Engine::Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  FlushIfOpen(count, requests);
  return api_.Testany(count, requests, index, flag, status);
}

int Engine::Testsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) {
  FlushIfOpen(incount, requests);
  return api_.Testsome(incount, requests, outcount, indices, statuses);
}

int Engine::Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  Drain();
  return api_.Waitany(count, requests, index, status);
}

int Engine::Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) {
  Drain();
  return api_.Waitsome(incount, requests, outcount, indices, statuses);
}

// ---- optimizers and statistics ---------------------------------------------------------------------------------

Status Engine::AttachOptimizer(hostopt::HostOptimizer* opt) {
  std::lock_guard lock(g_opt_mu);
  if (std::find(g_optimizers.begin(), g_optimizers.end(), opt) == g_optimizers.end()) g_optimizers.push_back(opt);
  return Status::Ok();
}

Status Engine::DetachOptimizer(hostopt::HostOptimizer* opt) {
  // Updates already decided for it finish first: the caller may destroy it next.
  if (Engine* e = Active()) {
    std::vector<CallPtr> pending;
    {
      std::lock_guard lock(e->mu_);
      e->DrainLocked();
      for (const auto& [request, call] : e->pending_) pending.push_back(call);
    }
    e->WaitCalls(std::move(pending));
  }
  std::lock_guard lock(g_opt_mu);
  g_optimizers.erase(std::remove(g_optimizers.begin(), g_optimizers.end(), opt), g_optimizers.end());
  return Status::Ok();
}

karma_dp_stats Engine::Stats() const {
  karma_dp_stats s{};
  s.active = Active() == this;
  s.rank = rank_;
  s.size = size_;
  s.rounds = stat_rounds_.load(std::memory_order_relaxed);
  s.planned_rounds = stat_planned_.load(std::memory_order_relaxed);
  s.calls = stat_calls_.load(std::memory_order_relaxed);
  s.groups = stat_groups_.load(std::memory_order_relaxed);
  s.bytes = stat_bytes_.load(std::memory_order_relaxed);
  s.host_updates = stat_updates_.load(std::memory_order_relaxed);
  s.prefetched_bytes = memory_.moved_bytes();
  std::lock_guard lock(mu_);
  s.alpha_s = cost_.alpha_s;
  s.beta_s_per_byte = cost_.beta_s_per_byte;
  return s;
}

// ---- the communication thread ----------------------------------------------------------------------------------

void Engine::CommLoop() {
  MeasureCost();
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mu_);
      queue_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    switch (task.type) {
      case Task::kGroup: RunGroup(task.group); break;
      case Task::kPlan: RunPlan(task); break;
      case Task::kFreeComm: api_.Comm_free(&task.to_free); break;
    }
  }
}

int Engine::Collective(const char* what, const GroupPtr& g, const std::function<int()>& fn) {
  {
    std::lock_guard lock(watch_mu_);
    inflight_since_ = MonotonicSeconds();
    inflight_what_ = g ? fmt::format("the allreduce of group {} (round {}, {} calls, {} bytes)", g->id, g->round,
                                     g->calls.size(), g->record.bytes)
                       : std::string(what);
  }
  const int rc = fn();
  std::lock_guard lock(watch_mu_);
  inflight_since_ = 0;
  return rc;
}

void Engine::Fail(const char* what, int rc) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  api_.Error_string(rc, text, &len);
  KARMA_LOG(kError, "{}: {} failed: {}; aborting the job", Describe(rank_, size_), what, text);
  api_.Abort(api_.comm_world, 70);
  _exit(70);
}

void Engine::MeasureCost() {
  CostModel cost;
  if (options_.cost_given) {
    cost = options_.cost;
  } else if (size_ > 1) {
    // Our own reduction at a few sizes, each the median of five after a warm-up, the slowest rank's time (a
    // collective ends when the last rank is done), fitted by least squares.
    static constexpr uint64_t kSizes[] = {4, 16 << 10, 256 << 10, 2 << 20};
    constexpr int kReps = 5;
    std::vector<float> buf(kSizes[std::size(kSizes) - 1] / sizeof(float), 1.0f);
    std::vector<double> medians;
    for (uint64_t bytes : kSizes) {
      std::vector<double> times;
      for (int rep = 0; rep <= kReps; ++rep) {
        int rc = Collective("the start-up barrier", nullptr, [&] { return api_.Barrier(world_dup_); });
        if (rc != MPI_SUCCESS) Fail("the start-up barrier", rc);
        const double t0 = MonotonicSeconds();
        rc = Collective("a start-up measurement allreduce", nullptr, [&] {
          return OrderedAllreduce(api_, world_dup_, rank_, size_, buf.data(), static_cast<int>(bytes / sizeof(float)),
                                  api_.type_float, sizeof(float), api_.op_sum, &scratch_);
        });
        if (rc != MPI_SUCCESS) Fail("a start-up measurement allreduce", rc);
        if (rep > 0) times.push_back(MonotonicSeconds() - t0);
      }
      std::sort(times.begin(), times.end());
      medians.push_back(times[times.size() / 2]);
    }
    const int rc = Collective("the start-up exchange of timings", nullptr, [&] {
      return api_.Allreduce(MPI_IN_PLACE, medians.data(), static_cast<int>(medians.size()), api_.type_double,
                            api_.op_max, world_dup_);
    });
    if (rc != MPI_SUCCESS) Fail("the start-up exchange of timings", rc);
    std::vector<CostSample> samples;
    for (size_t i = 0; i < medians.size(); ++i) samples.push_back({kSizes[i], medians[i]});
    auto fitted = FitCostModel(samples);
    if (fitted.ok()) cost = *fitted;
  }
  timeline_.SetCost(cost, !options_.cost_given && size_ > 1);
  KARMA_LOG(kInfo, "{}: allreduce cost model {}{}", Describe(rank_, size_), cost.ToString(),
            options_.cost_given ? " (KARMA_MPI_COST)" : "");
  std::lock_guard lock(mu_);
  cost_ = cost;
}

void Engine::RunPlan(Task& task) {
  // Every rank saw the same calls at different times; a collective starts when its last rank arrives, so each
  // call's latest arrival is what counts, and with the same inputs every rank computes the same plan.
  std::vector<double> ready(task.calls.size());
  for (size_t i = 0; i < ready.size(); ++i) ready[i] = task.calls[i].ready_s;
  const int rc = Collective("the exchange of a round's timings", nullptr, [&] {
    return api_.Allreduce(MPI_IN_PLACE, ready.data(), static_cast<int>(ready.size()), api_.type_double, api_.op_max,
                          task.comm);
  });
  if (rc != MPI_SUCCESS) Fail("the exchange of a round's timings", rc);
  for (size_t i = 0; i < ready.size(); ++i) task.calls[i].ready_s = ready[i];
  CostModel cost;
  {
    std::lock_guard lock(mu_);
    cost = cost_;
  }
  const std::vector<GroupSpan> groups = PlanGroups(task.calls, cost, options_.max_group_bytes);
  std::vector<int> ends;
  for (const GroupSpan& g : groups) ends.push_back(g.last);
  std::vector<int> singles(task.calls.size());
  std::iota(singles.begin(), singles.end(), 0);
  PlanRecord record;
  record.round = task.round;
  record.calls = static_cast<int>(task.calls.size());
  record.group_ends = ends;
  record.predicted_s = groups.back().end_s;
  record.wfbp_s = ScheduleGroups(task.calls, singles, cost).back().end_s;
  timeline_.AddPlan(record);
  KARMA_LOG(kInfo, "{}: plan from round {}: {} calls in {} groups (model: {:.3f} ms, {:.3f} ms call by call)",
            Describe(rank_, size_), task.round, task.calls.size(), groups.size(), record.predicted_s * 1e3,
            record.wfbp_s * 1e3);
  {
    std::lock_guard lock(mu_);
    task.kind->sigs = std::move(task.sigs);
    task.kind->group_ends = std::move(ends);
    task.kind->state = Kind::kReady;
  }
  plan_cv_.notify_all();
}

void Engine::RunGroup(const GroupPtr& g) {
  GroupRecord& r = g->record;
  r.id = g->id;
  r.round = g->round;
  r.planned = g->planned;
  r.first = g->calls.front()->index;
  r.last = g->calls.back()->index;
  r.start = MonotonicSeconds();
  int64_t total = 0;
  for (const CallPtr& c : g->calls) {
    r.bytes += c->bytes;
    total += c->count;
  }

  // Which calls reduce the gradient of a tensor an attached optimizer updates.
  {
    std::lock_guard lock(g_opt_mu);
    for (const CallPtr& c : g->calls) {
      for (hostopt::HostOptimizer* opt : g_optimizers) {
        if (auto owner = opt->FindByGradient(c->recv)) {
          c->opt = opt;
          c->tensor = owner->ref;
          c->arrays = owner->arrays;
          break;
        }
      }
    }
  }
  // The data the host is about to touch goes to the host first: the gradients, and for a host update the
  // parameters and optimizer state as well.
  for (const CallPtr& c : g->calls) {
    memory_.ToHost(c->send ? c->send : c->recv, c->bytes, c->device);
    if (c->send) memory_.ToHost(c->recv, c->bytes, c->device);
    if (c->opt) {
      const hostopt::TensorState& a = c->arrays;
      memory_.ToHost(a.param, a.numel * hostopt::DTypeSize(a.dtype), c->device);
      for (const float* s : {a.exp_avg, a.exp_avg_sq, a.momentum_buffer, a.master}) {
        if (s) memory_.ToHost(s, a.numel * sizeof(float), c->device);
      }
    }
  }
  memory_.Sync();
  r.moved = MonotonicSeconds();

  const Call& first = *g->calls.front();
  void* work = nullptr;
  const bool packed = g->calls.size() > 1;
  if (packed) {
    if (fusion_.size() < r.bytes) fusion_.resize(r.bytes);
    size_t offset = 0;
    for (const CallPtr& c : g->calls) {
      std::memcpy(fusion_.data() + offset, c->send ? c->send : c->recv, c->bytes);
      offset += c->bytes;
    }
    work = fusion_.data();
  } else {
    if (first.send && first.bytes > 0) std::memcpy(first.recv, first.send, first.bytes);
    work = first.recv;
  }
  const int rc = Collective(nullptr, g, [&] {
    return OrderedAllreduce(api_, first.dup, first.comm_rank, first.comm_size, work, static_cast<int>(total),
                            first.type, first.elem, first.op, &scratch_);
  });
  if (rc != MPI_SUCCESS) Fail(fmt::format("the allreduce of group {}", g->id).c_str(), rc);
  if (packed) {
    size_t offset = 0;
    for (const CallPtr& c : g->calls) {
      std::memcpy(c->recv, fusion_.data() + offset, c->bytes);
      offset += c->bytes;
    }
  }
  r.reduced = MonotonicSeconds();
  stat_groups_.fetch_add(1, std::memory_order_relaxed);
  stat_bytes_.fetch_add(r.bytes, std::memory_order_relaxed);

  bool updates = false;
  for (const CallPtr& c : g->calls) {
    if (c->opt) {
      updates = true;
    } else {
      memory_.ToDevice(c->recv, c->bytes, c->device);  // the application's optimizer reads it on the device
    }
  }
  if (!updates) {
    Complete(g);
    return;
  }
  {
    std::lock_guard lock(update_mu_);
    updates_.push_back(g);
  }
  update_cv_.notify_one();
}

void Engine::Complete(const GroupPtr& g) {
  g->record.done = MonotonicSeconds();
  // The request first, then our flag: a waiter that sees the flag finds the request complete in MPI too.
  for (const CallPtr& c : g->calls) {
    if (c->request != nullptr) api_.Grequest_complete(c->request);
  }
  {
    std::lock_guard lock(mu_);
    for (const CallPtr& c : g->calls) {
      c->done = true;
      // The application may have freed a completed request already and MPI handed the handle out again.
      if (c->request != nullptr) {
        auto it = pending_.find(c->request);
        if (it != pending_.end() && it->second == c) pending_.erase(it);
      }
    }
  }
  done_cv_.notify_all();
  timeline_.AddGroup(g->record);
  for (const CallPtr& c : g->calls) timeline_.AddCall({c->round, c->index, c->bytes, c->issued, c->group, c->blocking});
}

// ---- the update thread -----------------------------------------------------------------------------------------

void Engine::UpdateLoop() {
  for (;;) {
    GroupPtr g;
    {
      std::unique_lock lock(update_mu_);
      update_cv_.wait(lock, [&] { return !updates_.empty() || update_stop_; });
      if (updates_.empty()) return;
      g = std::move(updates_.front());
      updates_.pop_front();
    }
    // One step per optimizer for the tensors of this group (a buffer reduced twice in a group updates once).
    std::vector<std::pair<hostopt::HostOptimizer*, std::vector<hostopt::TensorRef>>> steps;
    for (const CallPtr& c : g->calls) {
      if (!c->opt) continue;
      auto it = std::find_if(steps.begin(), steps.end(), [&](const auto& s) { return s.first == c->opt; });
      if (it == steps.end()) it = steps.insert(steps.end(), {c->opt, {}});
      const bool listed = std::any_of(it->second.begin(), it->second.end(), [&](const hostopt::TensorRef& t) {
        return t.group == c->tensor.group && t.tensor == c->tensor.tensor;
      });
      if (!listed) it->second.push_back(c->tensor);
    }
    for (auto& [opt, tensors] : steps) {
      const Status st = opt->StepTensors(tensors);
      if (!st.ok()) {
        // The parameters would silently stay behind the other ranks': stop the job instead.
        KARMA_LOG(kError, "{}: host update failed: {}; aborting the job", Describe(rank_, size_), st.message());
        api_.Abort(api_.comm_world, 70);
        _exit(70);
      }
      stat_updates_.fetch_add(tensors.size(), std::memory_order_relaxed);
    }
    for (const CallPtr& c : g->calls) {
      if (c->opt) memory_.ToDevice(c->arrays.param, c->arrays.numel * hostopt::DTypeSize(c->arrays.dtype), c->device);
    }
    g->record.updated = MonotonicSeconds();
    Complete(g);
  }
}

// ---- the watchdog ---------------------------------------------------------------------------------------------

void Engine::WatchdogLoop() {
  std::unique_lock lock(watch_mu_);
  while (!watch_stop_) {
    watch_cv_.wait_for(lock, std::chrono::milliseconds(200));
    if (options_.timeout_s <= 0 || inflight_since_ <= 0) continue;
    if (MonotonicSeconds() - inflight_since_ < options_.timeout_s) continue;
    const std::string what = inflight_what_;
    lock.unlock();
    KARMA_LOG(kError,
              "{}: {} has not completed after {} s (KARMA_MPI_TIMEOUT): another rank has probably died or stopped; "
              "aborting the job",
              Describe(rank_, size_), what, options_.timeout_s);
    // MPI_Abort asks the launcher to kill every rank; should it hang on the broken job, leave anyway.
    std::thread([] {
      sleep(10);
      _exit(70);
    }).detach();
    api_.Abort(api_.comm_world, 70);
    _exit(70);
  }
}

}  // namespace karma::dp
