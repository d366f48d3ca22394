// Which allocations a kernel changes, in the recorded iteration: a kernel's pointer does not say whether it reads
// or writes, and the planner needs to know (an op that only reads a weight can be recomputed, one that updates it
// cannot). Each allocation a kernel gets a pointer into, unless the iteration allocated it and nothing used it yet
// (its first use writes it), is hashed before and after the kernel: equal, a read; different, a read-write. The
// hash before is the one the allocation's last probe left, while no op the probes do not see may have written it
// since. Bytes reach the host through pinned staging memory on a stream of the probes' own, ordered after the
// kernel's stream with an event: the copy engines' rate, not pageable memory's.
#pragma once

#include <cstdint>
#include <mutex>

#include "runtime/base/cuda_api.h"
#include "runtime/observe/recorder.h"

namespace karma::rt {

class Probes {
 public:
  explicit Probes(const CudaApi& api) : api_(api) {}
  Probes(const Probes&) = delete;
  Probes& operator=(const Probes&) = delete;

  // Before the op is issued (under the recording lock, with op.uses filled): hashes the allocations it may
  // change, or takes an earlier probe's hash, into op.probes; forgets the hashes of what it writes unseen.
  void Before(Recording& rec, RecordedOp& op);
  // After the real call: hashes them again and sets RecordedUse::changed.
  void After(Recording& rec, RecordedOp& op);
  // The stream, the event and the staging memory go (a recording ended; the next one creates them again).
  void Release();

  // Allocations above this are not probed: their kernels' uses stay touches (reads and writes).
  static constexpr uint64_t kMaxBytes = 256ull << 20;

 private:
  bool ReadyLocked();
  // The hash of [start, start + bytes) once the work enqueued on `after` so far is done; false on a failed call.
  bool HashLocked(Recording& rec, uint64_t start, uint64_t bytes, cudaStream_t after, uint64_t* out);

  const CudaApi& api_;
  std::mutex mu_;  // the staging memory, the stream, and every recording's hashes
  void* staging_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t event_ = nullptr;
  bool failed_ = false;  // creating them failed: no probes until Release
};

}  // namespace karma::rt
