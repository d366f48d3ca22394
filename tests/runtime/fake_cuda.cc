// The fake CUDA of the runtime tests.
#include "tests/runtime/fake_cuda.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

namespace karma::testing {
namespace {

FakeCuda* g_fake = new FakeCuda();

// Every fake function holds this: the session calls CUDA from several threads.
std::recursive_mutex& Mu() {
  static std::recursive_mutex* mu = new std::recursive_mutex();
  return *mu;
}
#define FAKE_LOCK std::lock_guard<std::recursive_mutex> fake_lock(Mu())

uintptr_t Key(const void* stream) {
  const auto k = reinterpret_cast<uintptr_t>(stream);
  return k == 1 ? 0 : k;
}

FakeCuda::Event* EventOf(cudaEvent_t e) {
  const auto i = reinterpret_cast<uintptr_t>(e);
  if (i == 0 || i > Fake().events.size()) return nullptr;
  FakeCuda::Event* ev = &Fake().events[i - 1];
  return ev->destroyed ? nullptr : ev;
}

cudaError_t Fail(cudaError_t e) {
  FAKE_LOCK;
  Fake().last_error = e;
  return e;
}

cudaError_t MallocManaged(void** p, size_t size, unsigned int) {
  FAKE_LOCK;
  FakeCuda& f = Fake();
  f.managed_calls++;
  if (f.managed_error != cudaSuccess) return Fail(f.managed_error);
  if (f.managed_reserved + size > f.managed_limit) return Fail(cudaErrorMemoryAllocation);
  f.managed_reserved += size;
  *p = reinterpret_cast<void*>(f.next_managed);
  f.next_managed += (size + 0xfff) / 0x1000 * 0x1000 + 0x1000;
  return cudaSuccess;
}

cudaError_t MemGetInfo(size_t* free, size_t* total) {
  FAKE_LOCK;
  *free = Fake().device_free;
  *total = Fake().device_total;
  return cudaSuccess;
}

cudaError_t GetDevice(int* d) {
  FAKE_LOCK;
  *d = Fake().device;
  return cudaSuccess;
}
cudaError_t SetDevice(int d) {
  FAKE_LOCK;
  Fake().device = d;
  return cudaSuccess;
}
cudaError_t GetLastError() {
  FAKE_LOCK;
  const cudaError_t e = Fake().last_error;
  Fake().last_error = cudaSuccess;
  return e;
}
cudaError_t PeekAtLastError() {
  FAKE_LOCK;
  return Fake().last_error;
}
cudaError_t RuntimeGetVersion(int* v) {
  FAKE_LOCK;
  *v = 13000;
  return cudaSuccess;
}

cudaError_t EventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  FAKE_LOCK;
  FakeCuda& f = Fake();
  f.events.push_back(FakeCuda::Event{});
  f.events.back().timing = (flags & cudaEventDisableTiming) == 0;
  f.events_created++;
  *e = reinterpret_cast<cudaEvent_t>(f.events.size());
  return cudaSuccess;
}
cudaError_t EventDestroy(cudaEvent_t e) {
  FAKE_LOCK;
  FakeCuda::Event* ev = EventOf(e);
  if (ev == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  ev->destroyed = true;
  Fake().events_destroyed++;
  return cudaSuccess;
}
cudaError_t EventRecord(cudaEvent_t e, cudaStream_t s) {
  FAKE_LOCK;
  FakeCuda::Event* ev = EventOf(e);
  if (ev == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  FakeCuda& f = Fake();
  FakeCuda::Stream& st = f.streams[Key(s)];
  ev->stream = Key(s);
  ev->ticket = ++st.submitted;
  ev->time_ns = f.clock_ns;
  ev->recorded = true;
  f.event_records++;
  return cudaSuccess;
}
cudaError_t EventQuery(cudaEvent_t e) {
  FAKE_LOCK;
  FakeCuda::Event* ev = EventOf(e);
  if (ev == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  if (!ev->recorded) Fake().unrecorded_uses++;
  return Fake().streams[ev->stream].completed >= ev->ticket ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t EventSynchronize(cudaEvent_t e) {
  FAKE_LOCK;
  FakeCuda::Event* ev = EventOf(e);
  if (ev == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  FakeCuda::Stream& st = Fake().streams[ev->stream];
  st.completed = std::max(st.completed, ev->ticket);
  return cudaSuccess;
}
cudaError_t EventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  FAKE_LOCK;
  FakeCuda::Event* ea = EventOf(a);
  FakeCuda::Event* eb = EventOf(b);
  if (ea == nullptr || eb == nullptr || !ea->timing || !eb->timing) return Fail(cudaErrorInvalidResourceHandle);
  *ms = static_cast<float>(static_cast<double>(eb->time_ns - ea->time_ns) / 1e6);
  return cudaSuccess;
}

// Offsets with natural alignment, as the compiler lays out kernel parameters.
cudaError_t FuncGetParamInfo(const void* func, size_t index, size_t* offset, size_t* size) {
  FAKE_LOCK;
  FakeCuda& f = Fake();
  if (!f.param_info_supported) return Fail(cudaErrorNotSupported);
  auto it = f.kernels.find(func);
  if (it == f.kernels.end() || index >= it->second.param_sizes.size()) return Fail(cudaErrorInvalidValue);
  size_t off = 0;
  for (size_t i = 0; i <= index; ++i) {
    const size_t s = it->second.param_sizes[i];
    const size_t align = std::min<size_t>(8, s >= 8 ? 8 : (s >= 4 ? 4 : (s >= 2 ? 2 : 1)));
    off = (off + align - 1) / align * align;
    if (i == index) {
      *offset = off;
      *size = s;
    }
    off += s;
  }
  return cudaSuccess;
}

cudaError_t FuncGetName(const char** name, const void* func) {
  FAKE_LOCK;
  auto it = Fake().kernels.find(func);
  if (it == Fake().kernels.end()) return Fail(cudaErrorInvalidDeviceFunction);
  *name = it->second.name.c_str();
  return cudaSuccess;
}

cublasStatus_t GetPointerMode(cublasHandle_t, cublasPointerMode_t* mode) {
  FAKE_LOCK;
  *mode = CUBLAS_POINTER_MODE_HOST;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t GetCublasStream(cublasHandle_t h, cudaStream_t* s) {
  FAKE_LOCK;
  // The tests use the handle's value as its stream.
  *s = reinterpret_cast<cudaStream_t>(h);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

void FakeCuda::CompleteAll() {
  FAKE_LOCK;
  for (auto& [k, s] : streams) s.completed = s.submitted;
}
void FakeCuda::Complete(uintptr_t stream) {
  FAKE_LOCK;
  Stream& s = streams[stream];
  s.completed = s.submitted;
}
void FakeCuda::Launch(const void* func, uintptr_t stream) {
  FAKE_LOCK;
  streams[stream].submitted++;
  launches[func]++;
  auto it = kernels.find(func);
  clock_ns += it != kernels.end() ? it->second.duration_ns : 1000;
}

FakeCuda& Fake() { return *g_fake; }
void ResetFake() { *g_fake = FakeCuda(); }

cudaError_t StreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  FAKE_LOCK;
  FakeCuda& f = Fake();
  *s = reinterpret_cast<cudaStream_t>(f.next_stream);
  f.next_stream += 0x10;
  return cudaSuccess;
}
cudaError_t StreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned int) {
  FAKE_LOCK;
  FakeCuda::Event* ev = EventOf(e);
  if (ev == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  if (!ev->recorded) Fake().unrecorded_uses++;
  return cudaSuccess;
}
void DelayMove() {
  const int ms = Fake().move_delay_ms;  // set before any executor runs
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}
// The virtual time a prefetch of `bytes` takes on the link (FakeCuda::h2d_bytes_per_ns).
void TransferTime(uint64_t bytes, bool to_device) {
  const double rate = to_device ? Fake().h2d_bytes_per_ns : Fake().d2h_bytes_per_ns;
  if (rate > 0) Fake().clock_ns += static_cast<uint64_t>(static_cast<double>(bytes) / rate);
}
void RecordMoves(const char* call, void** ptrs, size_t* sizes, size_t count, bool to_device) {
  if (std::strcmp(call, "prefetch") == 0) {
    for (size_t i = 0; i < count; ++i) TransferTime(sizes[i], to_device);
  }
  const int batch = ++Fake().move_calls;
  for (size_t i = 0; i < count; ++i) {
    Fake().moves.push_back({call, reinterpret_cast<uint64_t>(ptrs[i]), sizes[i], to_device, batch,
                            std::this_thread::get_id()});
  }
}
cudaError_t MemPrefetchAsync(const void* p, size_t n, cudaMemLocation loc, unsigned int, cudaStream_t) {
  DelayMove();
  FAKE_LOCK;
  TransferTime(n, loc.type == cudaMemLocationTypeDevice);
  Fake().moves.push_back({"prefetch", reinterpret_cast<uint64_t>(p), n, loc.type == cudaMemLocationTypeDevice,
                          ++Fake().move_calls, std::this_thread::get_id()});
  return cudaSuccess;
}
cudaError_t MemPrefetchBatchAsync(void** ptrs, size_t* sizes, size_t count, cudaMemLocation* locs, size_t*, size_t,
                                  unsigned long long, cudaStream_t) {
  DelayMove();
  FAKE_LOCK;
  RecordMoves("prefetch", ptrs, sizes, count, locs[0].type == cudaMemLocationTypeDevice);
  return cudaSuccess;
}
cudaError_t MemDiscardBatchAsync(void** ptrs, size_t* sizes, size_t count, unsigned long long, cudaStream_t) {
  FAKE_LOCK;
  RecordMoves("discard", ptrs, sizes, count, false);
  return cudaSuccess;
}
cudaError_t MemDiscardAndPrefetchBatchAsync(void** ptrs, size_t* sizes, size_t count, cudaMemLocation* locs, size_t*,
                                            size_t, unsigned long long, cudaStream_t) {
  FAKE_LOCK;
  RecordMoves("discard+prefetch", ptrs, sizes, count, locs[0].type == cudaMemLocationTypeDevice);
  return cudaSuccess;
}

rt::CudaApi FakeApi() {
  rt::CudaApi api;
  api.cudaMallocManaged = &MallocManaged;
  api.cudaMemGetInfo = &MemGetInfo;
  api.cudaGetDevice = &GetDevice;
  api.cudaSetDevice = &SetDevice;
  api.cudaGetLastError = &GetLastError;
  api.cudaPeekAtLastError = &PeekAtLastError;
  api.cudaRuntimeGetVersion = &RuntimeGetVersion;
  api.cudaEventCreateWithFlags = &EventCreateWithFlags;
  api.cudaEventDestroy = &EventDestroy;
  api.cudaEventRecord = &EventRecord;
  api.cudaEventQuery = &EventQuery;
  api.cudaEventSynchronize = &EventSynchronize;
  api.cudaEventElapsedTime = &EventElapsedTime;
  api.cudaFuncGetParamInfo = &FuncGetParamInfo;
  api.cudaFuncGetName = &FuncGetName;
  api.cublasGetPointerMode_v2 = &GetPointerMode;
  api.cublasGetStream_v2 = &GetCublasStream;
  return api;
}

rt::CudaApi FakeReplayApi() {
  rt::CudaApi api = FakeApi();
  api.cudaStreamCreateWithFlags = &StreamCreateWithFlags;
  api.cudaStreamWaitEvent = &StreamWaitEvent;
  api.cudaMemPrefetchAsync = &MemPrefetchAsync;
  api.cudaMemPrefetchBatchAsync = &MemPrefetchBatchAsync;
  api.cudaMemDiscardBatchAsync = &MemDiscardBatchAsync;
  api.cudaMemDiscardAndPrefetchBatchAsync = &MemDiscardAndPrefetchBatchAsync;
  return api;
}

cudaError_t FakeRealMalloc(void** p, size_t size) {
  FAKE_LOCK;
  FakeCuda& f = Fake();
  f.real_malloc_calls++;
  if (size > f.device_free) return Fail(cudaErrorMemoryAllocation);
  f.device_free -= size;
  *p = reinterpret_cast<void*>(f.next_device);
  f.next_device += (size + 511) / 512 * 512;
  return cudaSuccess;
}
cudaError_t FakeRealFree(void*) {
  FAKE_LOCK;
  Fake().real_free_calls++;
  return cudaSuccess;
}
cudaError_t FakeRealMallocAsync(void** p, size_t size, cudaStream_t) {
  FAKE_LOCK;
  return FakeRealMalloc(p, size);
}
cudaError_t FakeRealFreeAsync(void* p, cudaStream_t) {
  FAKE_LOCK;
  return FakeRealFree(p);
}
cudaError_t FakeRealMemGetInfo(size_t* free, size_t* total) {
  FAKE_LOCK;
  return MemGetInfo(free, total);
}

cudaError_t FakeRealLaunch(const void* func, dim3, dim3, void**, size_t, cudaStream_t stream) {
  FAKE_LOCK;
  Fake().Launch(func, Key(stream));
  return cudaSuccess;
}
cudaError_t FakeRealMemcpyAsync(void*, const void*, size_t n, cudaMemcpyKind, cudaStream_t s) {
  FAKE_LOCK;
  Fake().streams[Key(s)].submitted++;
  Fake().clock_ns += n / 16 + 1;
  return cudaSuccess;
}
cudaError_t FakeRealMemsetAsync(void*, int, size_t n, cudaStream_t s) {
  FAKE_LOCK;
  Fake().streams[Key(s)].submitted++;
  Fake().clock_ns += n / 32 + 1;
  return cudaSuccess;
}
cudaError_t FakeRealDeviceSynchronize() {
  FAKE_LOCK;
  Fake().CompleteAll();
  return cudaSuccess;
}
cudaError_t FakeRealStreamSynchronize(cudaStream_t s) {
  FAKE_LOCK;
  Fake().Complete(Key(s));
  return cudaSuccess;
}
cudaError_t FakeRealPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  FAKE_LOCK;
  // Everything the fake hands out from cudaMallocManaged answers as managed memory, like the real runtime.
  *a = cudaPointerAttributes{};
  const auto v = reinterpret_cast<uint64_t>(p);
  a->type = v >= 0x100000000000ull && v < 0x200000000000ull ? cudaMemoryTypeManaged : cudaMemoryTypeDevice;
  a->devicePointer = const_cast<void*>(p);
  a->hostPointer = a->type == cudaMemoryTypeManaged ? const_cast<void*>(p) : nullptr;
  return cudaSuccess;
}
cudaError_t FakeRealMallocHost(void** p, size_t size) {
  FAKE_LOCK;
  static uint64_t next = 0x300000000000ull;
  *p = reinterpret_cast<void*>(next);
  next += (size + 4095) / 4096 * 4096;
  return cudaSuccess;
}
cudaError_t FakeRealBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
  FAKE_LOCK;
  return cudaSuccess;
}
cudaError_t FakeRealEndCapture(cudaStream_t, cudaGraph_t* g) {
  FAKE_LOCK;
  if (g != nullptr) *g = nullptr;
  return cudaSuccess;
}
int FakeRealRangePush(const char*) {
  FAKE_LOCK;
  return 0;
}
cublasStatus_t FakeRealSgemm(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int m, int n, int k,
                             const float*, const float*, int, const float*, int, const float*, float*, int) {
  FAKE_LOCK;
  Fake().streams[Key(h)].submitted++;
  Fake().clock_ns += static_cast<uint64_t>(m) * n * k / 1000 + 1;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace karma::testing
