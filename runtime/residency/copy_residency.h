// The `copy` residency: device memory KARMA owns through CUDA's virtual memory management API.
//
// Every reservation is a range of virtual addresses (cuMemAddressReserve). Each granule of it is mapped onto one
// physical chunk at a time: a device chunk from the pool, or its own pinned host chunk (cuMemCreate on the host)
// while its bytes are away; or onto nothing, before its first make and while its value is dead and its device chunk
// serves another granule (a use then faults: loud, never a stale value). The pool creates device chunks as they are
// needed and never holds more than the budget's worth; a chunk given back stays in the pool for the next one. Every
// chunk is also mapped, once, at an address of its own (a staging address), so that a copy can fill a chunk that
// the granule is not mapped onto yet.
//
// Moves run in lanes of their own, one per direction (and one for makes, one for drops), each with its stream, so
// that evictions and fetches overlap on the two copy engines and no call on the caller's thread waits for a
// transfer. A lane has two threads: one starts its moves in order (takes device chunks, issues the copies, after the
// position the caller's events had when the move was posted), the other finishes them in order (waits for the
// copies, remaps): one move's copies run while the granules of the move before it are remapped, and a remap never
// holds up the next copy.
//   evict  after `after`: a copy device chunk -> host chunk; once it is done, the granule is unmapped and the device
//          chunk goes back to the pool; a thread of its own (the host mapper) then maps the granule onto its host
//          chunk, so that the lane's next remap does not wait behind this one's host mapping.
//   fetch  after `after`: a device chunk from the pool (waiting for an eviction to give one back), a copy host
//          chunk -> device chunk at its staging address; once it is done, the granule is mapped onto it.
//   drop   a dead value (freed, or discarded to be rebuilt): the granule keeps its chunk, marked dead after
//          `after`, until a make revives it in place (an allocator hands out the same addresses again, a recompute
//          rebuilds the value) or another granule needs the chunk; then the granule is unmapped, on the host
//          mapper's thread (a use nobody foresaw faults). Discarded values give their chunks first. A drop of a
//          granule with a move in flight is a job on the drop lane: after `after`, the granule is unmapped and its
//          chunk goes back to the pool.
//   make   a device chunk from the pool (or a dead granule's), mapped onto the granule after the last use of its
//          old value (the drop's `after`); nothing is copied.
// An eviction, a drop or a dead granule gives its device chunk before its old granule is unmapped: a make maps it
// at once (one chunk at two addresses for a moment) and completes only after that unmap, so the new value's writes
// never reach the old addresses; a fetch copies into the chunk only after the unmap.
// A move completes by writing its sequence number to a flag in pinned memory (cuStreamWriteValue32 on a stream of
// the lane's own that never waits, so the device sees the value when the thread wrote it); WaitOn makes a stream wait
// for that value (cuStreamWaitValue32), so that a stream waits for a remap without any thread waiting; RecordDone
// records an event after such a wait on a stream of the lane's own, for code that works with events. The access of
// the granules a move maps is set once per run of adjacent granules.
//
// Where a granule's bytes are while a move is in flight: an evicted granule stays mapped onto its device chunk
// until its copy is done (a write after the move started is lost, as with any use the plan did not foresee after
// a granule's last use), then is unmapped until the host mapper has mapped it onto its host chunk (tens of
// microseconds: a use then faults, loudly, and the context is lost); a fetched one stays mapped onto its host chunk
// until its copy is done (reads see the right bytes; a write meanwhile is lost), and the remap maps the device
// chunk right after the unmap, on the lane's finishing thread (between the two a use faults). Where no device
// chunk can be had (the pool is at the budget and no move in either queue will give one back), a fetch or make
// leaves the granule on its host chunk: correct and slow, counted in stranded().
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "runtime/residency/residency.h"
#include "runtime/base/cuda_api.h"

namespace karma::rt {

class CopyResidency final : public Residency {
 public:
  // A residency on `device` whose device chunks hold at most `budget` bytes; Unsupported where the device cannot
  // have both device and host chunks mapped through the virtual memory API.
  static Result<std::unique_ptr<CopyResidency>> Create(const CudaApi& api, int device, uint64_t budget);
  ~CopyResidency() override;
  CopyResidency(const CopyResidency&) = delete;
  CopyResidency& operator=(const CopyResidency&) = delete;

  const char* name() const override { return "copy"; }
  uint64_t granularity() const override { return granularity_; }
  Result<uint64_t> Reserve(uint64_t bytes, bool on_device = true) override;
  void Release(uint64_t addr) override;
  using Residency::Drop;
  using Residency::Evict;
  using Residency::Fetch;
  using Residency::Make;
  ResidencyTicket Evict(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                        const MoveEvents& events) override;
  ResidencyTicket Fetch(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                        const MoveEvents& events) override;
  ResidencyTicket Drop(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after, bool held,
                       std::optional<cudaStream_t> user) override;
  ResidencyTicket Make(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                       std::optional<cudaStream_t> user) override;
  Status WaitOn(ResidencyTicket t, cudaStream_t stream) override;
  Status RecordDone(ResidencyTicket t, cudaEvent_t event) override;
  bool Resident(ResidencyRange r) const override;
  bool Backed(ResidencyRange r) const override;
  bool Done(ResidencyTicket t) const override;
  // Returns once no move of the range is in flight. The driver checks a copy's or memset's pointers when it is
  // called, so the range must be mapped then, where a remap leaves a granule unmapped for a moment and a make maps
  // it only once it has a chunk (an H200 refused such a copy: cudaErrorInvalidValue). A move of the range posted by
  // another thread between this and the call can still catch it unmapped.
  void AwaitSettled(ResidencyRange r);
  void Finish() override;
  uint64_t device_bytes() const override;
  uint64_t live_bytes() const override;
  uint64_t peak_device_bytes() const override;

  // Granules mapped onto the device now, and fetches or makes that found no device chunk (left on the host).
  uint64_t device_granules() const;
  uint64_t stranded() const { return stranded_.load(std::memory_order_relaxed); }
  // The virtual memory calls made so far (create, map, set access, unmap; not the release of the pool at the end),
  // and the wall time they held their threads: the driver runs them one at a time (an H200 did), so their time
  // bounds how fast memory can change hands.
  struct CallTally {
    std::atomic<uint64_t> calls{0}, ns{0};
    template <typename Call>
    CUresult operator()(Call&& call) {
      const auto start = std::chrono::steady_clock::now();
      const CUresult r = call();
      ns.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now() - start).count()),
                   std::memory_order_relaxed);
      calls.fetch_add(1, std::memory_order_relaxed);
      return r;
    }
  };
  const CallTally& vmm_calls() const { return vmm_; }
  // The first failure of a CUDA call on a mover's thread (the moves after it are not made); OK when none.
  Status status() const;

 private:
  enum class Kind : uint8_t { kEvict, kFetch, kDrop, kMake };
  // One range's move; Each posts them all and returns the last ticket, with `events.done` recorded after it.
  ResidencyTicket One(Kind kind, ResidencyRange r, std::span<const cudaEvent_t> after, bool held);
  ResidencyTicket Each(Kind kind, std::span<const ResidencyRange> rs, std::span<const cudaEvent_t> after, bool held,
                       const MoveEvents& events);
  // To the host (evict), to the device (fetch), device memory without a copy (make), dead values (drop): a make
  // or a drop never waits behind another granule's transfer.
  enum Lane : uint32_t { kOut = 0, kIn = 1, kNew = 2, kDead = 3, kLanes = 4 };
  struct Chunk {
    CUmemGenericAllocationHandle handle = 0;
    uint64_t staging = 0;  // where it is mapped on its own
    // Taken while its old granule is still mapped onto it (being unmapped on the giving thread, or the host
    // mapper's): a make may map it at once but completes only after the unmap; a fetch copies into it only after.
    bool releasing = false;
    // Recorded by the thread that gave the chunk: `copied` once its old value was copied out (an eviction's), `given`
    // once its old granule was unmapped. A make's stream waits for `copied`, its completion for `given`; a fetch's
    // stream waits for `given`. On a GPU they have long completed; they tell a simulated device that the chunk's
    // next use comes after the giving thread's work (threads handing work over through a lock keep their own clocks).
    cudaEvent_t copied = nullptr, given = nullptr;
  };
  // Where a granule's addresses lead, besides a device chunk (an index into pool_).
  static constexpr int kOnHost = -1;    // its host chunk: a value away from the device
  static constexpr int kUnmapped = -2;  // nothing: never used yet, or a dead value whose device chunk was taken
  static constexpr int kStay = -3;      // a job's granule that goes nowhere new
  static constexpr int kToHost = -4;    // nothing yet: evicted, its device chunk given back, its host mapping queued
  static constexpr int kToUnmap = -5;   // a dead value whose device chunk was taken, still mapped until the unmap
  struct Granule {
    Chunk host;                           // handle 0 until first needed
    int device = kUnmapped;               // a device chunk (index into pool_), kOnHost or kUnmapped
    uint32_t posted = 0, completed = 0;   // moves of it posted and done: they run in the order they were posted
    // Dropped: its value is dead once this event has completed (the last use of the old value, which a remap or a
    // new value must not overtake). On the device, its chunk may then be taken for another granule (the granule is
    // then unmapped); a make revives it in place.
    std::shared_ptr<CUevent_st> dead;
    uint64_t dropped_as = 0;  // its key in dropped_ while dead on the device; 0: not there
  };
  // A granule of a job, its place among the moves of that granule (they run in that order on either lane), and
  // how many of its bytes hold the value (what a copy moves).
  struct GranuleOrder {
    uint64_t addr;
    uint32_t order;
    uint64_t data;
  };
  struct Reservation {
    uint64_t bytes = 0;
    std::vector<Granule> granules;
  };
  struct Job {
    Kind kind;
    cudaEvent_t after = nullptr;  // owned: the caller's event's position, recorded on the lane's stream
    uint32_t seq = 0;
    std::vector<GranuleOrder> granules;
  };
  // A job whose copies are issued: once they are done, its granules are remapped (FinishJob).
  struct Started {
    Job job;
    cudaEvent_t done = nullptr;                   // after its copies, on the lane's stream
    std::vector<std::pair<uint64_t, int>> moved;  // (granule, where it goes: a device chunk, kOnHost, kUnmapped, kStay)
    std::vector<int> after_given;                 // a make's chunks: it completes after their `given`
  };
  // Jobs a lane has started and not finished, at most.
  static constexpr size_t kInFlight = 8;
  struct LaneState {
    std::deque<Job> jobs;
    uint32_t issued = 0;
    cudaStream_t stream = nullptr;
    cudaStream_t gate = nullptr;    // where each post's `after` is recorded, in the order of the posts
    cudaStream_t bridge = nullptr;  // waits for the flag's values, for RecordDone's events
    cudaStream_t signal = nullptr;  // writes the flag (SignalLocked)
    std::vector<cudaEvent_t> spare;  // Started::done events to use again
    // The last completed seq: in device memory (flags_), written by `signal`, waited on by streams (drivers refuse
    // stream memory operations on pinned host memory on some machines, an H200 among them); `done` is the host's
    // copy, for Done.
    uint32_t* flag = nullptr;
    std::atomic<uint32_t> done{0};
    std::deque<Started> started;  // in the order of the jobs
    std::thread thread, finisher;
  };

  CopyResidency(const CudaApi& api, int device, uint64_t budget);
  Status Init();
  ResidencyTicket Post(Kind kind, ResidencyRange r, std::span<const cudaEvent_t> after);
  // A lane's two threads: one starts its jobs in order (takes the chunks, issues the copies), the other finishes
  // them in order (waits for their copies, remaps, signals), so that a job's copies go out while the granules of
  // the jobs before it are remapped.
  void Run(Lane lane);
  void RunFinisher(Lane lane);
  // Maps evicted granules onto their host chunks, and unmaps dead granules whose chunks were taken (host_),
  // off the lanes' threads: an eviction's next remap need not wait for this one's host mapping, and a make that
  // takes a dead granule's chunk maps it while the dead granule is unmapped.
  void RunHostMaps();
  // The lane's job `seq` is done: its flag takes the value, written on the lane's signal stream (mu_ held).
  void SignalLocked(Lane lane, uint32_t seq);
  // Takes the device chunks and issues the copies (mu_ held; may wait for an earlier move or for a chunk).
  Started StartJob(Lane lane, Job job, std::unique_lock<std::mutex>& lock);
  // Once its copies are done: the remaps (made without mu_), and the chunks given back (mu_ held).
  void FinishJob(Lane lane, Started& started, std::unique_lock<std::mutex>& lock);
  // The granule at `addr`: its reservation's entry (mu_ held).
  Granule* Find(uint64_t addr);
  const Granule* Find(uint64_t addr) const;
  // Maps one chunk at `addr`; with `access`, also makes it readable and writable by the device (else the caller
  // does, once for a run of granules: SetAccess).
  Status MapOnto(uint64_t addr, CUmemGenericAllocationHandle handle, bool access = true);
  Status SetAccess(uint64_t addr, uint64_t bytes);
  // Access for granules just mapped, set once per run of adjacent ones.
  void SetAccessRuns(std::vector<uint64_t> granules);
  // The granule is no longer dead (a make revived it, or a move gave it a value): out of dropped_ (mu_ held).
  void Undrop(Granule* g);
  Result<Chunk> NewChunk(bool on_host);
  Status EnsureHostChunk(Granule* g);
  // A free device chunk (mu_ held; waits while a move in flight may give one back, takes a dropped granule's);
  // -1 when none can be had.
  int TakeDeviceChunk(std::unique_lock<std::mutex>& lock);
  // The chunk of a dropped granule whose value is dead by now (mu_ held; may wait for a drop's event); -1: none.
  int TakeDroppedChunk(std::unique_lock<std::mutex>& lock);
  // Drops and makes of granules with no move pending happen at once, without a job: a drop marks the granule, a
  // make of a granule on the device revives it. Returns false when some granule needs a job.
  // `held`: a drop of a value discarded to be rebuilt (its chunk is taken before freed values').
  bool DropOrReviveInPlace(Kind kind, ResidencyRange r, std::span<const cudaEvent_t> after, bool held = false);
  // Whether `ok` holds for every granule of `r` (null where `r` leaves the reservations), and how many granules of
  // all reservations it holds for (mu_ taken).
  template <typename Pred>
  bool Every(ResidencyRange r, Pred ok) const;
  template <typename Pred>
  uint64_t Count(Pred ok) const;
  // A device chunk no granule is mapped onto back to the pool (mu_ held).
  void GiveBack(int chunk);
  // A chunk given back while its old granule was mapped onto it (Chunk::releasing) is free of it now: `given` is
  // recorded on `on`, the giving lane's signal stream (mu_ held).
  void Released(int chunk, cudaStream_t on);
  // Records a chunk's event (made on first use) on `on`.
  void RecordOn(cudaEvent_t* event, cudaStream_t on);
  // A lane has jobs queued or running (mu_ held).
  bool LaneBusy(uint32_t l) const { return !lanes_[l].jobs.empty() || running_[l] != 0; }
  // A wait longer than kStall logs the lanes' state (mu_ held), once per kStall: a hang says where it is.
  static constexpr std::chrono::seconds kStall{10};
  void LogStall(const char* what) const;
  // Keeps the first failure; true when `st` is one.
  bool Fail(Status st);

  const CudaApi& api_;
  const int device_;
  const uint64_t budget_;
  uint64_t granularity_ = 0;
  size_t max_chunks_ = 0;
  CUmemLocation host_location_{CU_MEM_LOCATION_TYPE_HOST, 0};  // host chunks' (Init: else the host NUMA node)

  mutable std::mutex mu_;
  std::condition_variable cv_;  // a job posted, a chunk given back, a lane idle, stopping
  std::map<uint64_t, Reservation> reservations_;  // by start address
  std::vector<Chunk> pool_;
  std::vector<int> free_chunks_;
  // Granules on the device whose value is dead (Granule::dead), discarded ones before freed ones, oldest drop first:
  // the first to give their chunks (the ones dropped last are the likeliest to be allocated again soon, and revived
  // in place).
  std::map<uint64_t, uint64_t> dropped_;  // drop number (freed values' above kFreedDrops) -> granule address
  static constexpr uint64_t kFreedDrops = 1ull << 62;
  uint64_t drops_ = 0;
  std::array<LaneState, kLanes> lanes_;
  void* flags_ = nullptr;  // the lanes' flags, a cache line each (cudaMalloc)
  // The host mapper's work: an evicted granule (kToHost) to map onto its host chunk, or a dead one (kToUnmap) to
  // unmap, whose chunk (releasing) it then releases.
  struct HostWork {
    uint64_t addr;
    int chunk = -1;                    // kToUnmap: the chunk taken
    std::shared_ptr<CUevent_st> dead;  // kToUnmap: the last use of its value
  };
  struct HostMapper {
    std::vector<HostWork> work;
    bool busy = false;              // working on a batch (outside mu_)
    cudaStream_t stream = nullptr;  // where it records Chunk::given
    std::thread thread;
  } host_;
  std::array<uint32_t, kLanes> running_{};  // jobs a lane has taken and not finished
  uint64_t finished_ = 0;                    // jobs finished on every lane (the host mapper's watchdog)
  std::array<bool, kLanes> blocked_{};  // a lane waits for a granule's earlier move (on another lane)
  bool stopping_ = false;
  mutable std::mutex failure_mu_;
  Status failure_;
  std::atomic<uint64_t> stranded_{0};
  CallTally vmm_;
  uint64_t peak_chunks_ = 0;
};

}  // namespace karma::rt
