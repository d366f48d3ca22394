// A small fake CUDA for the runtime's tests: the functions of the session's CudaApi table plus "real" functions
// for the hooks, over a model of streams whose work completes only when a test says so, virtual time for event
// timing, fake device addresses, and the runtime's per-thread last error.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/cuda_api.h"

namespace karma::testing {

struct FakeKernel {
  std::string name;
  std::vector<size_t> param_sizes;  // laid out with natural alignment (capped at 8)
  uint64_t duration_ns = 1000;      // virtual time a launch of it takes
};

struct FakeCuda {
  // Device and managed memory.
  uint64_t device_total = 16ull << 30;
  uint64_t device_free = 16ull << 30;
  uint64_t managed_limit = 256ull << 30;  // cudaMallocManaged fails beyond this many reserved bytes
  uint64_t managed_reserved = 0;
  cudaError_t managed_error = cudaSuccess;  // forced failure of every cudaMallocManaged
  int managed_calls = 0;
  int real_malloc_calls = 0;  // the fake "real" cudaMalloc/cudaFree of the hooks
  int real_free_calls = 0;
  uint64_t next_managed = 0x100000001000ull;  // deliberately not 2 MiB aligned
  uint64_t next_device = 0x200000000000ull;
  // Streams: work submitted and completed, as tickets. Events remember a ticket and a virtual time.
  struct Stream {
    uint64_t submitted = 0;
    uint64_t completed = 0;
  };
  struct Event {
    uintptr_t stream = 0;
    uint64_t ticket = 0;
    uint64_t time_ns = 0;
    bool timing = true;
    bool destroyed = false;
    bool recorded = false;
  };
  std::map<uintptr_t, Stream> streams;
  std::vector<Event> events;  // cudaEvent_t = index + 1
  uint64_t clock_ns = 0;
  int events_created = 0;
  int events_destroyed = 0;
  int event_records = 0;
  // Waits for and queries of events never recorded (they order nothing and read as complete).
  int unrecorded_uses = 0;
  // Kernels by host stub.
  std::map<const void*, FakeKernel> kernels;
  std::map<const void*, int> launches;  // per kernel, the application's and the session's own
  bool param_info_supported = true;
  // The runtime's last error (one thread is enough for these tests).
  cudaError_t last_error = cudaSuccess;
  int device = 0;

  // Managed-memory moves the executor asked for (FakeReplayApi), in call order.
  struct Move {
    std::string call;  // "prefetch", "discard" or "discard+prefetch"
    uint64_t addr = 0, bytes = 0;
    bool to_device = false;
    int batch = 0;     // which API call asked for it (ranges of one batch call share it)
    std::thread::id thread;  // the thread that called
  };
  std::vector<Move> moves;
  int move_delay_ms = 0;  // each prefetch call takes this long before it returns, as a blocking one would
  // When > 0, a prefetch call advances the virtual clock by its bytes at this rate (its transfer), per direction.
  double h2d_bytes_per_ns = 0, d2h_bytes_per_ns = 0;
  int move_calls = 0;
  uintptr_t next_stream = 0x5000;

  // Marks all work submitted so far as done.
  void CompleteAll();
  void Complete(uintptr_t stream);
  // Simulates one launch of a kernel on a stream: submits work and advances virtual time.
  void Launch(const void* func, uintptr_t stream);
};

// The process-wide fake; Reset() returns it to defaults.
FakeCuda& Fake();
void ResetFake();
rt::CudaApi FakeApi();
// FakeApi plus what the executor needs to replay: stream creation, stream waits and managed-memory moves.
rt::CudaApi FakeReplayApi();

// Fake "real" functions for the hooks' real-function parameter.
cudaError_t FakeRealMalloc(void** p, size_t size);
cudaError_t FakeRealFree(void* p);
cudaError_t FakeRealMallocAsync(void** p, size_t size, cudaStream_t s);
cudaError_t FakeRealFreeAsync(void* p, cudaStream_t s);
cudaError_t FakeRealMemGetInfo(size_t* free, size_t* total);
cudaError_t FakeRealLaunch(const void* func, dim3 grid, dim3 block, void** args, size_t shmem, cudaStream_t stream);
cudaError_t FakeRealMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t FakeRealMemsetAsync(void* p, int v, size_t n, cudaStream_t s);
cudaError_t FakeRealDeviceSynchronize();
cudaError_t FakeRealStreamSynchronize(cudaStream_t s);
cudaError_t FakeRealPointerGetAttributes(cudaPointerAttributes* a, const void* p);
cudaError_t FakeRealMallocHost(void** p, size_t size);
cudaError_t FakeRealBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t FakeRealEndCapture(cudaStream_t s, cudaGraph_t* g);
int FakeRealRangePush(const char* name);
cublasStatus_t FakeRealSgemm(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float*,
                             const float*, int, const float*, int, const float*, float*, int);

}  // namespace karma::testing
