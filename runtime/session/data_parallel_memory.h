// libkarma_mpi.so's memory hooks (karma_dp_set_memory_hooks, include/karma/karma.h) served by libkarma.so: the
// buffers the data-parallel shim reads and writes on the host (gradients before their exchange, parameters and
// optimizer state around a host update) move through the executor's residency, and the planner learns which
// buffers they are, so that the plan keeps them off the device between iterations: each gradient goes out once the
// backward pass has written it, each parameter comes back before the next forward pass reads it, within the budget
// (policy::HomeOnHost).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "include/karma/karma.h"
#include "runtime/base/cuda_api.h"
#include "runtime/base/event_pool.h"
#include "runtime/observe/recorder.h"
#include "runtime/replay/executor.h"

namespace karma::rt {

class DataParallelMemory {
 public:
  DataParallelMemory(const CudaApi& api, Executor& executor) : api_(api), executor_(executor) {}
  DataParallelMemory(const DataParallelMemory&) = delete;
  DataParallelMemory& operator=(const DataParallelMemory&) = delete;

  // Installs the hooks when libkarma_mpi.so is in the process (its karma_dp_set_memory_hooks is found): false when
  // it is not. Uninstall gives the shim its own mover back (at exit: no move after the executor's last).
  bool Install();
  void Uninstall();

  // Per buffer of `rec`: the shim has handed part of it to the host (a to_host call), and the iteration's device
  // work is done with its value once it has last written it (no op reads it later), so the host reads or writes it
  // between iterations: a gradient the host updates from, a parameter the host updates. A gradient the application's
  // own optimizer reads on the device after its exchange is not homed. Empty when the shim has handed over nothing.
  std::vector<bool> HomedBuffers(const RecordedIteration& rec) const;

 private:
  // The hooks (called on the shim's threads).
  static void ToHost(void* ctx, const void* p, size_t bytes);
  static void Sync(void* ctx);
  static void ToDevice(void* ctx, const void* p, size_t bytes);

  const CudaApi& api_;
  Executor& executor_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> seen_;     // start -> end of every range given to to_host
  std::vector<cudaEvent_t> pending_;       // to_host moves Sync has not waited for
  EventPool events_{api_};
  karma_status (*set_hooks_)(const karma_dp_memory_hooks*) = nullptr;
};

}  // namespace karma::rt
