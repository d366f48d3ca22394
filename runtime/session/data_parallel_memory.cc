// The data-parallel shim's memory hooks, served through the executor's residency.
#include "runtime/session/data_parallel_memory.h"

#include <dlfcn.h>

#include <algorithm>
#include <iterator>

#include "ground/common/log.h"

namespace karma::rt {

bool DataParallelMemory::Install() {
  // Only a shim already in the process (preloaded): libkarma.so never loads it.
  auto set = reinterpret_cast<karma_status (*)(const karma_dp_memory_hooks*)>(
      dlsym(RTLD_DEFAULT, "karma_dp_set_memory_hooks"));
  if (set == nullptr) return false;
  karma_dp_memory_hooks hooks{};
  hooks.ctx = this;
  hooks.to_host = &DataParallelMemory::ToHost;
  hooks.sync = &DataParallelMemory::Sync;
  hooks.to_device = &DataParallelMemory::ToDevice;
  if (set(&hooks) != KARMA_OK) {
    KARMA_LOG(kWarn, "libkarma_mpi.so refused the memory hooks: it moves the buffers it updates itself");
    return false;
  }
  {
    std::lock_guard lock(mu_);
    set_hooks_ = set;
  }
  KARMA_LOG(kInfo, "libkarma_mpi.so: the buffers it exchanges and updates on the host move through the plan");
  return true;
}

void DataParallelMemory::Uninstall() {
  karma_status (*set)(const karma_dp_memory_hooks*) = nullptr;
  {
    std::lock_guard lock(mu_);
    set = set_hooks_;
    set_hooks_ = nullptr;
  }
  if (set != nullptr) set(nullptr);
}

std::vector<bool> DataParallelMemory::HomedBuffers(const RecordedIteration& rec) const {
  std::lock_guard lock(mu_);
  if (seen_.empty()) return {};
  // The last op of the iteration that writes each buffer, and the last that reads it (kNone: none).
  const size_t n = rec.buffers.size();
  std::vector<uint32_t> last_write(n, trace::kNone), last_read(n, trace::kNone);
  for (const trace::Op& op : rec.it.ops) {
    for (const std::vector<trace::BufferId>* list : {&op.reads, &op.touches}) {
      for (trace::BufferId b : *list) last_read[b] = op.id;
    }
    for (const std::vector<trace::BufferId>* list : {&op.writes, &op.touches}) {
      for (trace::BufferId b : *list) last_write[b] = op.id;
    }
  }
  std::vector<bool> homed(n, false);
  for (size_t b = 0; b < n; ++b) {
    // A value the device reads after its last write is the device's to finish with (a gradient the application's
    // own optimizer applies once it is reduced): the shim hands it over and gets it back within the iteration.
    if (last_write[b] != trace::kNone && last_read[b] != trace::kNone && last_read[b] > last_write[b]) continue;
    const uint64_t lo = rec.buffers[b].address, hi = lo + rec.buffers[b].bytes;
    if (hi == lo) continue;
    // The first range that ends after lo: the one starting at or before it, or the next one.
    auto it = seen_.upper_bound(lo);
    if (it != seen_.begin() && std::prev(it)->second > lo) --it;
    homed[b] = it != seen_.end() && it->first < hi && it->second > lo;
  }
  return homed;
}

void DataParallelMemory::ToHost(void* ctx, const void* p, size_t bytes) {
  auto* self = static_cast<DataParallelMemory*>(ctx);
  const uint64_t addr = reinterpret_cast<uint64_t>(p);
  if (bytes == 0) return;
  std::lock_guard lock(self->mu_);
  uint64_t& end = self->seen_[addr];
  end = std::max(end, addr + bytes);
  // The pages go after whatever the plan moved before: an eviction the plan made after the buffer's last use
  // leaves this one nothing to copy.
  cudaEvent_t done = self->events_.Acquire();
  if (done == nullptr) return;  // the host reads the bytes where they are (managed memory)
  if (self->executor_.MoveForHost(addr, bytes, /*to_device=*/false, done)) {
    self->pending_.push_back(done);
  } else {
    self->events_.Release(done);
  }
}

void DataParallelMemory::Sync(void* ctx) {
  auto* self = static_cast<DataParallelMemory*>(ctx);
  std::vector<cudaEvent_t> pending;
  {
    std::lock_guard lock(self->mu_);
    pending.swap(self->pending_);
  }
  LastErrorScope errors(self->api_);
  for (cudaEvent_t e : pending) {
    if (self->api_.cudaEventSynchronize(e) != cudaSuccess) errors.Failed();
  }
  std::lock_guard lock(self->mu_);
  for (cudaEvent_t e : pending) self->events_.Release(e);
}

void DataParallelMemory::ToDevice(void* ctx, const void* p, size_t bytes) {
  auto* self = static_cast<DataParallelMemory*>(ctx);
  const uint64_t addr = reinterpret_cast<uint64_t>(p);
  // A buffer the running plan homes on the host comes back at the plan's time, before its next use.
  if (bytes == 0 || self->executor_.PlanBringsBack(addr)) return;
  // No event: nobody waits for it, the device's own use does (managed memory).
  self->executor_.MoveForHost(addr, bytes, /*to_device=*/true, nullptr);
}

}  // namespace karma::rt
