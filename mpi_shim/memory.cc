// The memory hooks of the shim and the built-in CUDA managed-memory prefetcher.
#include "mpi_shim/memory.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "ground/common/managed_pages.h"

namespace karma::dp {

// The real CUDA runtime, reached through its own handle: the shim's moves are not the application's work, so
// they go around libkarma.so's hooks even where it is preloaded in front of the runtime.
struct MemoryMover::Cuda {
  decltype(&::cudaMemPrefetchAsync) prefetch = nullptr;
  decltype(&::cudaStreamCreateWithFlags) stream_create = nullptr;
  decltype(&::cudaStreamSynchronize) stream_sync = nullptr;
  decltype(&::cudaGetLastError) get_last_error = nullptr;
  decltype(&::cudaGetDevice) get_device = nullptr;
  decltype(&::cudaSetDevice) set_device = nullptr;
  cudaStream_t stream = nullptr;
  bool stream_ready = false;
};

namespace {

template <typename T>
bool Sym(void* lib, T* slot, const char* name) {
  *slot = reinterpret_cast<T>(dlsym(lib, name));
  return *slot != nullptr;
}

}  // namespace

void MemoryMover::SetHooks(const karma_dp_memory_hooks* hooks) {
  std::lock_guard lock(mu_);
  have_hooks_ = hooks != nullptr;
  hooks_ = hooks ? *hooks : karma_dp_memory_hooks{};
}

bool MemoryMover::Builtin() {
  if (!builtin_enabled_) return false;
  if (cuda_tried_) return cuda_ != nullptr;
  cuda_tried_ = true;
  // Only a runtime the application already loaded: a process without CUDA has no managed memory to move.
  void* lib = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  if (lib == nullptr) return false;
  auto* c = new Cuda;
  if (!Sym(lib, &c->prefetch, "cudaMemPrefetchAsync") || !Sym(lib, &c->stream_create, "cudaStreamCreateWithFlags") ||
      !Sym(lib, &c->stream_sync, "cudaStreamSynchronize") || !Sym(lib, &c->get_last_error, "cudaGetLastError") ||
      !Sym(lib, &c->get_device, "cudaGetDevice") || !Sym(lib, &c->set_device, "cudaSetDevice")) {
    delete c;
    return false;
  }
  cuda_ = c;
  return true;
}

int MemoryMover::CurrentDevice() {
  std::lock_guard lock(mu_);
  int device = 0;
  if (!have_hooks_ && Builtin() && cuda_->get_device(&device) != cudaSuccess) {
    (void)cuda_->get_last_error();
    device = 0;
  }
  return device;
}

void MemoryMover::Prefetch(const void* p, size_t bytes, bool to_device, int device) {
  // Only the pages the buffer covers entirely (karma::OwnedPageBytes): a small gradient sharing a page with live
  // activations must not drag them to the host.
  const uint64_t begin = PageUp(reinterpret_cast<uint64_t>(p));
  const uint64_t owned = OwnedPageBytes(reinterpret_cast<uint64_t>(p), bytes);
  if (owned == 0) return;
  Cuda& c = *cuda_;
  // The stream is a blocking one: work the application then queues on the legacy default stream (the next
  // forward pass) waits for the prefetches of updated parameters.
  if (c.set_device(device) != cudaSuccess) {
    (void)c.get_last_error();
    return;
  }
  if (!c.stream_ready) {
    if (c.stream_create(&c.stream, cudaStreamDefault) != cudaSuccess) {
      (void)c.get_last_error();
      return;
    }
    c.stream_ready = true;
  }
  cudaMemLocation where{};
  where.type = to_device ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
  where.id = to_device ? device : 0;
  if (c.prefetch(reinterpret_cast<const void*>(begin), owned, where, 0, c.stream) == cudaSuccess) {
    moved_.fetch_add(owned, std::memory_order_relaxed);
  } else {
    (void)c.get_last_error();  // not managed memory: nothing to move, the host reads it where it is
  }
}

void MemoryMover::Move(const void* p, size_t bytes, int device, bool to_device) {
  std::lock_guard lock(mu_);
  if (have_hooks_) {
    if (auto hook = to_device ? hooks_.to_device : hooks_.to_host) hook(hooks_.ctx, p, bytes);
  } else if (Builtin()) {
    Prefetch(p, bytes, to_device, device);
  }
}

void MemoryMover::Sync() {
  std::lock_guard lock(mu_);
  if (have_hooks_) {
    if (hooks_.sync) hooks_.sync(hooks_.ctx);
  } else if (Builtin() && cuda_->stream_ready && cuda_->stream_sync(cuda_->stream) != cudaSuccess) {
    (void)cuda_->get_last_error();
  }
}

}  // namespace karma::dp
