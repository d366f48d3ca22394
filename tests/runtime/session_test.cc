// The session through its hook handlers, against the fake CUDA: allocation, error codes, memory info,
// recording a training loop to a valid .ktrace, markers, divergence, degradation, the live view, threads.
#include "runtime/session/session.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include "interpose/hooks.h"
#include "ground/trace/analysis.h"
#include "ground/trace/ktrace_io.h"
#include "tests/runtime/fake_cuda.h"

namespace karma::rt {
namespace {

using testing::Fake;

char kFwd, kBwd, kSgd;  // kernel host stubs

void* Ptr(uint64_t v) { return reinterpret_cast<void*>(v); }
uint64_t U(const void* p) { return reinterpret_cast<uint64_t>(p); }

// The fake's driver functions are its runtime ones with the driver's types: the result as a CUresult.
CUresult AsDriver(cudaError_t e) { return e == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN; }

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::ResetFake();
    Fake().kernels[&kFwd] = {"fwd_kernel", {8, 8, 8, 4}, 5000};
    Fake().kernels[&kBwd] = {"bwd_kernel", {8, 8, 8, 4}, 9000};
    Fake().kernels[&kSgd] = {"sgd_kernel", {8, 8}, 700};
    char tmpl[] = "/tmp/karma-session-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    Session::InstallForTest(nullptr);
    session_.reset();
    std::filesystem::remove_all(dir_);
  }
  Session& Start(Mode mode, const std::function<void(SessionConfig&)>& adjust = nullptr) {
    SessionConfig c;
    c.mode = mode;
    c.capacity = *ParseCapacity("0.5");
    c.trace_dir = dir_ + "/traces";
    c.live_view = false;
    c.arena_segment_bytes = 64ull << 20;
    if (adjust) adjust(c);
    session_ = std::make_unique<Session>(c, testing::FakeApi(), static_cast<int64_t>(::getpid()));
    Session::InstallForTest(session_.get());
    return *session_;
  }

  std::string dir_;
  std::unique_ptr<Session> session_;
};

// A training step on one stream: input copy, a forward kernel, a GEMM, a zeroed gradient, a backward kernel and
// an optimizer kernel; temporaries allocated and freed stream-ordered, then a host synchronization.
struct Model {
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(0x5000);
  cublasHandle_t handle = reinterpret_cast<cublasHandle_t>(0x5000);  // the fake's handle is its stream
  void* w1 = nullptr;
  void* w2 = nullptr;
  char host[16] = {};

  void Init() {
    ASSERT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &w1, 4 << 20), cudaSuccess);
    ASSERT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &w2, 1 << 20), cudaSuccess);
  }
  void* Alloc(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(hook::cudaMallocAsync(&testing::FakeRealMallocAsync, &p, n, stream), cudaSuccess);
    return p;
  }
  bool cooperative_bwd = false;  // the backward kernel through cudaLaunchCooperativeKernel
  // Which entry points upload the input and zero the gradient.
  enum class Copies {
    kRuntime,
    kRuntimePerThread,
    kRuntimeSyncPerThread,
    kDriver,
    kDriverPerThread,
    kDriverSync,
    kRuntimeBatch,       // the upload as a batch of one copy (cudaMemcpyBatchAsync)
    kDriverBatch,        // the same through cuMemcpyBatchAsync_v2_ptsz
    kRuntimeBatchOfTwo,  // a batch that also uploads w2
  };
  Copies copies = Copies::kRuntime;
  void Upload(void* x, size_t n) {
    const auto d = static_cast<CUdeviceptr>(U(x));
    auto copy = [](CUdeviceptr, const void*, size_t n, CUstream s) {
      return AsDriver(testing::FakeRealMemcpyAsync(nullptr, nullptr, n, cudaMemcpyHostToDevice, s));
    };
    auto any_copy = [](CUdeviceptr, CUdeviceptr, size_t n, CUstream s) {
      return AsDriver(testing::FakeRealMemcpyAsync(nullptr, nullptr, n, cudaMemcpyDefault, s));
    };
    auto sync_copy = [](CUdeviceptr, const void*, size_t n) {
      return AsDriver(testing::FakeRealMemcpyAsync(nullptr, nullptr, n, cudaMemcpyHostToDevice, nullptr));
    };
    auto rt_sync_copy = [](void*, const void*, size_t n, cudaMemcpyKind k) {
      return testing::FakeRealMemcpyAsync(nullptr, nullptr, n, k, nullptr);
    };
    auto batch = [](void* const*, const void* const*, const size_t* sizes, size_t count, cudaMemcpyAttributes*,
                    size_t*, size_t, cudaStream_t s) {
      size_t n = 0;
      for (size_t i = 0; i < count; ++i) n += sizes[i];
      return testing::FakeRealMemcpyAsync(nullptr, nullptr, n, cudaMemcpyDefault, s);
    };
    auto driver_batch = [](CUdeviceptr*, CUdeviceptr*, size_t* sizes, size_t count, CUmemcpyAttributes*, size_t*,
                           size_t, CUstream s) {
      size_t n = 0;
      for (size_t i = 0; i < count; ++i) n += sizes[i];
      return AsDriver(testing::FakeRealMemcpyAsync(nullptr, nullptr, n, cudaMemcpyDefault, s));
    };
    cudaMemcpyAttributes attrs{};
    attrs.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    CUmemcpyAttributes driver_attrs{};
    driver_attrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t first = 0;
    switch (copies) {
      case Copies::kRuntime:
        EXPECT_EQ(hook::cudaMemcpyAsync(&testing::FakeRealMemcpyAsync, x, host, n, cudaMemcpyHostToDevice, stream),
                  cudaSuccess);
        break;
      case Copies::kRuntimePerThread:
        EXPECT_EQ(
            hook::cudaMemcpyAsync_ptsz(&testing::FakeRealMemcpyAsync, x, host, n, cudaMemcpyHostToDevice, stream),
            cudaSuccess);
        break;
      case Copies::kRuntimeSyncPerThread:
        EXPECT_EQ(hook::cudaMemcpy_ptds(rt_sync_copy, x, host, n, cudaMemcpyHostToDevice), cudaSuccess);
        break;
      case Copies::kDriver: EXPECT_EQ(hook::cuMemcpyHtoDAsync_v2(copy, d, host, n, stream), CUDA_SUCCESS); break;
      case Copies::kDriverPerThread:
        EXPECT_EQ(hook::cuMemcpyAsync_ptsz(any_copy, d, static_cast<CUdeviceptr>(U(host)), n, stream), CUDA_SUCCESS);
        break;
      case Copies::kDriverSync: EXPECT_EQ(hook::cuMemcpyHtoD_v2(sync_copy, d, host, n), CUDA_SUCCESS); break;
      case Copies::kRuntimeBatch: {
        void* dsts[] = {x};
        const void* srcs[] = {host};
        const size_t sizes[] = {n};
        EXPECT_EQ(hook::cudaMemcpyBatchAsync(batch, dsts, srcs, sizes, 1, &attrs, &first, 1, stream), cudaSuccess);
        break;
      }
      case Copies::kDriverBatch: {
        CUdeviceptr dsts[] = {d};
        CUdeviceptr srcs[] = {static_cast<CUdeviceptr>(U(host))};
        size_t sizes[] = {n};
        EXPECT_EQ(hook::cuMemcpyBatchAsync_v2_ptsz(driver_batch, dsts, srcs, sizes, 1, &driver_attrs, &first, 1,
                                                   stream),
                  CUDA_SUCCESS);
        break;
      }
      case Copies::kRuntimeBatchOfTwo: {
        void* dsts[] = {x, w2};
        const void* srcs[] = {host, host};
        const size_t sizes[] = {n, 1 << 20};
        EXPECT_EQ(hook::cudaMemcpyBatchAsync(batch, dsts, srcs, sizes, 2, &attrs, &first, 1, stream), cudaSuccess);
        break;
      }
    }
  }
  void Zero(void* g, size_t n) {
    const auto d = static_cast<CUdeviceptr>(U(g));
    auto set32 = [](CUdeviceptr, unsigned, size_t count, CUstream s) {
      return AsDriver(testing::FakeRealMemsetAsync(nullptr, 0, count * 4, s));
    };
    auto set16 = [](CUdeviceptr, unsigned short, size_t count, CUstream s) {
      return AsDriver(testing::FakeRealMemsetAsync(nullptr, 0, count * 2, s));
    };
    auto set8 = [](CUdeviceptr, unsigned char, size_t count) {
      return AsDriver(testing::FakeRealMemsetAsync(nullptr, 0, count, nullptr));
    };
    auto rt_sync_set = [](void*, int, size_t count) { return testing::FakeRealMemsetAsync(nullptr, 0, count, nullptr); };
    switch (copies) {
      case Copies::kRuntime:
        EXPECT_EQ(hook::cudaMemsetAsync(&testing::FakeRealMemsetAsync, g, 0, n, stream), cudaSuccess);
        break;
      case Copies::kRuntimePerThread:
        EXPECT_EQ(hook::cudaMemsetAsync_ptsz(&testing::FakeRealMemsetAsync, g, 0, n, stream), cudaSuccess);
        break;
      case Copies::kRuntimeSyncPerThread: EXPECT_EQ(hook::cudaMemset_ptds(rt_sync_set, g, 0, n), cudaSuccess); break;
      case Copies::kDriver: EXPECT_EQ(hook::cuMemsetD32Async(set32, d, 0, n / 4, stream), CUDA_SUCCESS); break;
      case Copies::kDriverPerThread:
        EXPECT_EQ(hook::cuMemsetD16Async_ptsz(set16, d, 0, n / 2, stream), CUDA_SUCCESS);
        break;
      case Copies::kDriverSync: EXPECT_EQ(hook::cuMemsetD8_v2(set8, d, 0, n), CUDA_SUCCESS); break;
      case Copies::kRuntimeBatch:
      case Copies::kDriverBatch:
      case Copies::kRuntimeBatchOfTwo:
        EXPECT_EQ(hook::cudaMemsetAsync(&testing::FakeRealMemsetAsync, g, 0, n, stream), cudaSuccess);
        break;
    }
  }
  void Launch(const void* k, void** args) {
    if (cooperative_bwd && k == &kBwd) {
      EXPECT_EQ(hook::cudaLaunchCooperativeKernel(&testing::FakeRealLaunch, k, dim3(64), dim3(256), args, 0, stream),
                cudaSuccess);
      return;
    }
    EXPECT_EQ(hook::cudaLaunchKernel(&testing::FakeRealLaunch, k, dim3(64), dim3(256), args, 0, stream), cudaSuccess);
  }
  void Step(bool extra_kernel = false) {
    void* x = Alloc(3 << 20);
    Upload(x, 3 << 20);
    void* a1 = Alloc(8 << 20);
    int n = 5;
    void* fwd_args[] = {&x, &w1, &a1, &n};
    Launch(&kFwd, fwd_args);
    void* a2 = Alloc(2 << 20);
    const float alpha = 1, beta = 0;
    hook::cublasSgemm_v2(&testing::FakeRealSgemm, handle, CUBLAS_OP_N, CUBLAS_OP_N, 256, 256, 256, &alpha,
                         static_cast<float*>(a1), 256, static_cast<float*>(w2), 256, &beta, static_cast<float*>(a2),
                         256);
    void* g = Alloc(4 << 20);
    Zero(g, 4 << 20);
    void* bwd_args[] = {&a2, &a1, &g, &n};
    Launch(&kBwd, bwd_args);
    if (extra_kernel) Launch(&kBwd, bwd_args);
    void* sgd_args[] = {&w1, &g};
    Launch(&kSgd, sgd_args);
    for (void* p : {a2, a1, x, g}) EXPECT_EQ(hook::cudaFreeAsync(&testing::FakeRealFreeAsync, p, stream), cudaSuccess);
    hook::cudaStreamSynchronize(&testing::FakeRealStreamSynchronize, stream);
  }
};

// Runs 12 steps of `m` in a recording session: the recorded iteration, which has the step's 6 ops.
void RecordSteps(Session& s, Model& m, std::optional<trace::Iteration>* out) {
  m.Init();
  for (int i = 0; i < 12; ++i) m.Step();
  s.WaitForWorker();
  ASSERT_EQ(s.state(), live::State::kRecorded);
  auto it = trace::ReadKtraceFile(s.trace_path());
  ASSERT_TRUE(it.ok()) << it.status().ToString();
  ASSERT_EQ(it->ops.size(), 6u);
  *out = std::move(*it);
}

TEST_F(SessionTest, DeviceAllocationsComeFromTheArenaWithoutRealCalls) {
  Session& s = Start(Mode::kUm);
  void* p = nullptr;
  ASSERT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &p, 10 << 20), cudaSuccess);
  EXPECT_TRUE(s.arena().Contains(U(p)));
  EXPECT_EQ(U(p) % kLargePage, 0u);
  CUdeviceptr d = 0;
  ASSERT_EQ(hook::cuMemAlloc_v2([](CUdeviceptr*, size_t) { return CUDA_ERROR_UNKNOWN; }, &d, 1000), CUDA_SUCCESS);
  EXPECT_TRUE(s.arena().Contains(d));
  EXPECT_EQ(Fake().real_malloc_calls, 0);
  EXPECT_EQ(s.registry().size(), 2u);
  EXPECT_EQ(s.stats().used_bytes.load(), (10ull << 20) + 1024);
  ASSERT_EQ(hook::cudaFree(&testing::FakeRealFree, p), cudaSuccess);
  ASSERT_EQ(hook::cuMemFree_v2([](CUdeviceptr) { return CUDA_ERROR_UNKNOWN; }, d), CUDA_SUCCESS);
  EXPECT_EQ(Fake().real_free_calls, 0);
  EXPECT_EQ(s.registry().size(), 0u);
  EXPECT_EQ(s.stats().peak_used_bytes.load(), (10ull << 20) + 1024);
}

TEST_F(SessionTest, ErrorCodesAreTheOnesTheApplicationWouldGet) {
  Start(Mode::kUm);
  Fake().managed_limit = 256ull << 20;
  void* p = Ptr(0x1234);
  EXPECT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &p, 1ull << 40), cudaErrorMemoryAllocation);
  EXPECT_EQ(Fake().last_error, cudaErrorMemoryAllocation);  // as cudaMalloc leaves it
  Fake().last_error = cudaSuccess;
  CUdeviceptr d = 0;
  EXPECT_EQ(hook::cuMemAlloc_v2([](CUdeviceptr*, size_t) { return CUDA_SUCCESS; }, &d, 1ull << 40),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(Fake().last_error, cudaSuccess);  // the driver API has no last error to leave
  // Zero bytes, null out-pointers and null frees are the real runtime's business.
  EXPECT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &p, 0), cudaSuccess);
  EXPECT_EQ(Fake().real_malloc_calls, 1);
  EXPECT_EQ(hook::cudaFree(&testing::FakeRealFree, nullptr), cudaSuccess);
  EXPECT_EQ(Fake().real_free_calls, 1);
  // A double free, and a pointer into the middle of a block.
  void* q = nullptr;
  ASSERT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &q, 4 << 20), cudaSuccess);
  EXPECT_EQ(hook::cudaFree(&testing::FakeRealFree, static_cast<char*>(q) + 256), cudaErrorInvalidValue);
  EXPECT_EQ(hook::cudaFree(&testing::FakeRealFree, q), cudaSuccess);
  EXPECT_EQ(hook::cudaFree(&testing::FakeRealFree, q), cudaErrorInvalidValue);
  EXPECT_EQ(Fake().real_free_calls, 1);
  // Someone else's pointer goes to the real cudaFree.
  EXPECT_EQ(hook::cudaFree(&testing::FakeRealFree, Ptr(0x42000)), cudaSuccess);
  EXPECT_EQ(Fake().real_free_calls, 2);
}

TEST_F(SessionTest, WithoutManagedMemoryAllocationsPassThroughAfterOneMessage) {
  Session& s = Start(Mode::kUm);
  Fake().managed_error = cudaErrorNotSupported;
  ::testing::internal::CaptureStderr();
  void* p = nullptr;
  void* q = nullptr;
  ASSERT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &p, 1 << 20), cudaSuccess);
  ASSERT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &q, 1 << 20), cudaSuccess);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Fake().managed_calls, 1);
  EXPECT_EQ(Fake().real_malloc_calls, 2);
  EXPECT_EQ(Fake().last_error, cudaSuccess);
  EXPECT_TRUE(s.degraded(Part::kArena));
  EXPECT_NE(err.find("allocation arena disabled"), std::string::npos) << err;
  EXPECT_EQ(err.find("disabled"), err.rfind("disabled")) << "one line only: " << err;
  EXPECT_EQ(s.registry().size(), 2u);  // passed-through device memory is still known
  EXPECT_EQ(hook::cudaFree(&testing::FakeRealFree, p), cudaSuccess);
  EXPECT_EQ(Fake().real_free_calls, 1);
}

// KARMA_RESIDENCY=copy on a driver without the virtual memory API (the fake's): allocations pass through, never to
// managed memory (on a device made short of memory, oversubscribing it could hang the GPU).
TEST_F(SessionTest, ACopyResidencyAskedForAndNotAvailablePassesThroughWithoutManagedMemory) {
  Session& s = Start(Mode::kAuto, [](SessionConfig& c) { c.residency = ResidencyChoice::kCopy; });
  ::testing::internal::CaptureStderr();
  void* p = nullptr;
  ASSERT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &p, 1 << 20), cudaSuccess);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Fake().managed_calls, 0);
  EXPECT_EQ(Fake().real_malloc_calls, 1);
  EXPECT_TRUE(s.degraded(Part::kArena));
  EXPECT_TRUE(s.degraded(Part::kRecording)) << "no plan: its moves and scratch would be managed memory";
  EXPECT_NE(err.find("KARMA_RESIDENCY=copy is not available here"), std::string::npos) << err;
  EXPECT_EQ(hook::cudaFree(&testing::FakeRealFree, p), cudaSuccess);
}

TEST_F(SessionTest, MemGetInfoStaysWithinTheBudget) {
  Session& s = Start(Mode::kUm);
  Fake().device_total = 16ull << 30;
  Fake().device_free = 15ull << 30;
  void* p = nullptr;
  ASSERT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &p, 6ull << 30), cudaSuccess);
  size_t free = 0, total = 0;
  ASSERT_EQ(hook::cudaMemGetInfo(&testing::FakeRealMemGetInfo, &free, &total), cudaSuccess);
  EXPECT_EQ(total, 16ull << 30);
  // Budget 7.5 GiB (capacity 0.5 of the 15 GiB free at the first allocation) minus 6 GiB held.
  EXPECT_EQ(free, 1536ull << 20);
  EXPECT_LE(free + s.arena().usage().live_bytes, s.stats().budget_bytes.load());
  void* q = nullptr;
  ASSERT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &q, 4ull << 30), cudaSuccess);  // beyond: still served
  ASSERT_EQ(hook::cudaMemGetInfo(&testing::FakeRealMemGetInfo, &free, &total), cudaSuccess);
  EXPECT_EQ(free, 0u);
  EXPECT_EQ(s.stats().budget_bytes.load(), 7680ull << 20);
}

// On a device another process fills: a budget given in bytes stays as given, with one warning that it is more than
// is free; a fraction (the default's form) is of what is free.
TEST_F(SessionTest, ABudgetAboveWhatIsFreeIsWarnedAboutAndAFractionIsOfWhatIsFree) {
  for (const bool bytes : {true, false}) {
    SetUp();
    Session& s = Start(Mode::kUm, [&](SessionConfig& c) { c.capacity = *ParseCapacity(bytes ? "8GiB" : "0.9"); });
    Fake().device_total = 80ull << 30;
    Fake().device_free = 4ull << 30;  // another process holds 76 GiB
    ::testing::internal::CaptureStderr();
    void* p = nullptr;
    ASSERT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &p, 1 << 20), cudaSuccess);
    const std::string err = ::testing::internal::GetCapturedStderr();
    if (bytes) {
      EXPECT_EQ(s.stats().budget_bytes.load(), 8ull << 30);
      EXPECT_NE(err.find("KARMA_CAPACITY 8.00 GiB is more than the 4.00 GiB free on the device (76.00 GiB of 80.00 "
                         "GiB held already"),
                std::string::npos)
          << err;
    } else {
      EXPECT_EQ(s.stats().budget_bytes.load(), static_cast<uint64_t>(0.9 * (4ull << 30)));
      EXPECT_EQ(err.find("more than"), std::string::npos) << err;
    }
    TearDown();
  }
}

TEST_F(SessionTest, ArenaPointersLookLikeDeviceMemory) {
  Start(Mode::kUm);
  void* p = nullptr;
  ASSERT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &p, 1 << 20), cudaSuccess);
  cudaPointerAttributes a{};
  ASSERT_EQ(hook::cudaPointerGetAttributes(&testing::FakeRealPointerGetAttributes, &a, p), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.device, 0);
  EXPECT_EQ(a.hostPointer, nullptr);
  EXPECT_EQ(a.devicePointer, p);
  // What the driver would say of the address now does not matter: on the copy path a block's addresses may lead to
  // a host chunk or, for a moment, nowhere (a driver calls them unregistered, device -2, or refuses them).
  auto unmapped = [](cudaPointerAttributes* x, const void*) {
    *x = cudaPointerAttributes{};
    x->type = cudaMemoryTypeUnregistered;
    x->device = -2;
    return cudaErrorInvalidValue;
  };
  a = cudaPointerAttributes{};
  ASSERT_EQ(hook::cudaPointerGetAttributes(+unmapped, &a, static_cast<char*>(p) + 4096), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.device, 0);
  EXPECT_EQ(a.devicePointer, static_cast<char*>(p) + 4096);
  // Outside the arena: the driver's answer.
  EXPECT_EQ(hook::cudaPointerGetAttributes(+unmapped, &a, Ptr(0x7000)), cudaErrorInvalidValue);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
}

// An allocation the application holds through the recorded iteration but no op of it uses is not in the trace (the
// plan cannot count it): the log says how many, how much, and the largest.
TEST_F(SessionTest, TheRecordingNamesAllocationsNoOpUsed) {
  Session& s = Start(Mode::kRecord);
  SetLogLevel(LogLevel::kInfo);
  Model m;
  m.Init();
  void* idle = nullptr;
  ASSERT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &idle, 3 << 20), cudaSuccess);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 12; ++i) m.Step();
  s.WaitForWorker();
  const std::string err = ::testing::internal::GetCapturedStderr();
  SetLogLevel(LogLevel::kWarn);
  ASSERT_EQ(s.state(), live::State::kRecorded);
  EXPECT_NE(err.find("1 allocation the application held (3.00 MiB) was used by no op of the recorded iteration (the "
                     "largest, 3.00 MiB, allocated at"),
            std::string::npos)
      << err;
}

TEST_F(SessionTest, RecordsASteadyIterationAsAValidTrace) {
  Session& s = Start(Mode::kRecord);
  Model m;
  m.Init();
  for (int i = 0; i < 12; ++i) m.Step();
  s.WaitForWorker();
  ASSERT_EQ(s.state(), live::State::kRecorded);
  const std::string path = s.trace_path();
  ASSERT_FALSE(path.empty());
  EXPECT_EQ(path.rfind(dir_ + "/traces/", 0), 0u) << path;
  auto it = trace::ReadKtraceFile(path);
  ASSERT_TRUE(it.ok()) << it.status().ToString();
  ASSERT_TRUE(trace::Validate(*it).ok());
  // One iteration: copy, fwd, gemm, memset, bwd, sgd.
  ASSERT_EQ(it->ops.size(), 6u);
  EXPECT_EQ(it->ops[0].name, "memcpy HtoD");
  EXPECT_EQ(it->ops[0].kind, trace::OpKind::kCopy);
  EXPECT_EQ(it->ops[1].name, "fwd_kernel");
  EXPECT_EQ(it->ops[2].name, "cublasSgemm_v2");
  EXPECT_EQ(it->ops[2].kind, trace::OpKind::kLibrary);
  EXPECT_EQ(it->ops[2].flops, 2ull * 256 * 256 * 256);
  EXPECT_EQ(it->ops[3].kind, trace::OpKind::kMemset);
  EXPECT_EQ(it->ops[5].name, "sgd_kernel");
  // Durations from the events around each op (virtual time of the fake).
  EXPECT_EQ(it->ops[1].duration_ns, 5000u);
  EXPECT_EQ(it->ops[4].duration_ns, 9000u);
  // Buffers: w1, w2 (persistent) and the four temporaries, with exact GEMM operands.
  ASSERT_EQ(it->buffers.size(), 6u);
  // The GEMM writes 256 KiB of its 2 MiB output allocation: the rest keeps what it held, so it also reads it.
  const trace::Op& gemm = it->ops[2];
  ASSERT_EQ(gemm.reads.size(), 3u);
  ASSERT_EQ(gemm.writes.size(), 1u);
  EXPECT_EQ(it->buffers[gemm.writes[0]].bytes, 2u << 20);
  EXPECT_EQ(it->buffers[gemm.writes[0]].dtype, "float32");
  // The forward kernel's output was allocated in the iteration: its first use writes it; w1 is only touched.
  const trace::Op& fwd = it->ops[1];
  ASSERT_EQ(fwd.writes.size(), 1u);
  EXPECT_EQ(it->buffers[fwd.writes[0]].bytes, 8u << 20);
  EXPECT_EQ(it->buffers[fwd.writes[0]].kind, trace::BufferKind::kActivation);
  EXPECT_FALSE(fwd.touches.empty());
  // Every temporary is allocated and freed inside the iteration; the weights are not.
  int allocs = 0, frees = 0;
  for (const trace::Event& e : it->events) {
    allocs += e.kind == trace::EventKind::kAlloc;
    frees += e.kind == trace::EventKind::kFreeRequested;
  }
  EXPECT_EQ(allocs, 4);
  EXPECT_EQ(frees, 4);
  const auto lifetimes = trace::ComputeLifetimes(*it);
  int persistent = 0;
  for (const auto& l : lifetimes) persistent += l.persistent;
  EXPECT_EQ(persistent, 2);
  // Allocation sites were captured while detecting.
  for (const trace::Buffer& b : it->buffers) EXPECT_FALSE(b.site.empty());
  // The statistics.
  EXPECT_EQ(s.stats().period_ops.load(), 6u);
  EXPECT_GE(s.stats().recorded_iteration.load(), 1u);
  EXPECT_GE(s.stats().iteration.load(), 7u);
  // Nothing of the session's leaks into the application's error state, and every timing event is released.
  EXPECT_EQ(Fake().last_error, cudaSuccess);
  int live_timing_events = 0;
  for (const auto& e : Fake().events) live_timing_events += e.timing && !e.destroyed;
  EXPECT_EQ(live_timing_events, 0);
  EXPECT_NE(s.SummaryLine().find("trace " + path), std::string::npos) << s.SummaryLine();
}

// A kernel launched cooperatively (grid-wide synchronization) is an op like any other: detected, recorded with the
// buffers its arguments point into. It is never launched again by the session (a run on copies or a recompute
// through the plain entry point would break its synchronization): its launches are the application's.
TEST_F(SessionTest, CooperativeLaunchesAreRecordedAndNeverLaunchedAgain) {
  for (const bool cooperative : {false, true}) {
    SetUp();
    Session& s = Start(Mode::kRecord);
    Model m;
    m.cooperative_bwd = cooperative;
    std::optional<trace::Iteration> it;
    ASSERT_NO_FATAL_FAILURE(RecordSteps(s, m, &it)) << cooperative;
    const trace::Op& bwd = it->ops[4];
    EXPECT_EQ(bwd.name, "bwd_kernel");
    EXPECT_EQ(bwd.kind, trace::OpKind::kKernel);
    EXPECT_EQ(bwd.reads.size() + bwd.writes.size() + bwd.touches.size(), 3u);  // a2, a1, g
    const auto rec = s.recorded();
    ASSERT_NE(rec, nullptr);
    EXPECT_EQ(rec->ops[4].relaunch == nullptr, cooperative);
    EXPECT_NE(rec->ops[1].relaunch, nullptr);  // the forward kernel, launched plainly
    EXPECT_EQ(Fake().launches[&kBwd], 12);
    TearDown();
  }
}

// Copies and memsets through the driver API, the per-thread default stream's entry points or a batch of copies
// are the same ops as through the runtime's: the same iteration, each op with the same buffers and extents. Only
// the synchronous forms' stream differs (the default stream's). A batch of two copies is one op writing both.
TEST_F(SessionTest, DriverAndPerThreadCopiesAndMemsetsAreRecordedAsTheRuntimesAre) {
  using Copies = Model::Copies;
  std::vector<trace::Op> reference;
  for (const Copies copies : {Copies::kRuntime, Copies::kRuntimePerThread, Copies::kRuntimeSyncPerThread,
                              Copies::kDriver, Copies::kDriverPerThread, Copies::kDriverSync, Copies::kRuntimeBatch,
                              Copies::kDriverBatch, Copies::kRuntimeBatchOfTwo}) {
    const int flavour = static_cast<int>(copies);
    SetUp();
    Session& s = Start(Mode::kRecord);
    Model m;
    m.copies = copies;
    std::optional<trace::Iteration> it;
    ASSERT_NO_FATAL_FAILURE(RecordSteps(s, m, &it)) << flavour;
    const trace::Op& upload = it->ops[0];
    const trace::Op& zero = it->ops[3];
    EXPECT_EQ(upload.kind, trace::OpKind::kCopy) << flavour;
    EXPECT_EQ(zero.kind, trace::OpKind::kMemset) << flavour;
    if (copies == Copies::kRuntimeBatchOfTwo) {  // one op writes both: x and w2
      ASSERT_EQ(upload.writes.size(), 2u);
      EXPECT_EQ(it->buffers[upload.writes[0]].bytes + it->buffers[upload.writes[1]].bytes, 4u << 20);
      EXPECT_EQ(upload.bytes, 2u * (4u << 20));
      TearDown();
      continue;
    }
    ASSERT_EQ(upload.writes.size(), 1u) << flavour;
    ASSERT_EQ(zero.writes.size(), 1u) << flavour;
    EXPECT_EQ(it->buffers[upload.writes[0]].bytes, 3u << 20) << flavour;
    EXPECT_EQ(it->buffers[zero.writes[0]].bytes, 4u << 20) << flavour;
    const bool sync = copies == Copies::kRuntimeSyncPerThread || copies == Copies::kDriverSync;
    EXPECT_EQ(upload.stream == it->ops[1].stream, !sync) << flavour;  // the forward kernel's stream
    EXPECT_EQ(zero.stream == it->ops[1].stream, !sync) << flavour;
    if (copies == Copies::kRuntime) {
      reference = it->ops;
    } else {
      for (size_t i = 0; i < reference.size(); ++i) {
        const trace::Op& a = reference[i];
        const trace::Op& b = it->ops[i];
        EXPECT_EQ(a.kind, b.kind) << flavour << " op " << i;
        EXPECT_EQ(a.reads, b.reads) << flavour << " op " << i;
        EXPECT_EQ(a.writes, b.writes) << flavour << " op " << i;
        EXPECT_EQ(a.touches, b.touches) << flavour << " op " << i;
        EXPECT_EQ(a.bytes, b.bytes) << flavour << " op " << i;
      }
    }
    TearDown();
  }
}

TEST_F(SessionTest, TheRecordedIterationKeepsCountingAndPlacementStaysStable) {
  Session& s = Start(Mode::kRecord);
  Model m;
  m.Init();
  for (int i = 0; i < 12; ++i) m.Step();
  s.WaitForWorker();
  const uint64_t iterations = s.stats().iteration.load();
  for (int i = 0; i < 5; ++i) m.Step();
  EXPECT_EQ(s.stats().iteration.load(), iterations + 5);
  EXPECT_GT(s.arena().usage().placement_hits, 0u);
}

TEST_F(SessionTest, DetectionDoesNotDependOnWhereTheAllocatorPutsBuffers) {
  // Frees stay pending (no synchronization) and same-stream reuse takes the oldest pending block, so A and B
  // swap places every iteration; the period is still one iteration.
  Session& s = Start(Mode::kRecord);
  Model m;
  std::set<uint64_t> a_places;
  for (int i = 0; i < 12; ++i) {
    void* a = m.Alloc(4 << 20);
    void* b = m.Alloc(4 << 20);
    a_places.insert(U(a));
    int n = 1;
    void* args1[] = {&a, &b, &b, &n};
    m.Launch(&kFwd, args1);
    hook::cudaFreeAsync(&testing::FakeRealFreeAsync, a, m.stream);
    void* c = m.Alloc(4 << 20);
    hook::cudaMemsetAsync(&testing::FakeRealMemsetAsync, c, 0, 4 << 20, m.stream);
    void* args2[] = {&b, &c, &c, &n};
    m.Launch(&kBwd, args2);
    hook::cudaMemcpyAsync(&testing::FakeRealMemcpyAsync, m.host, c, 16, cudaMemcpyDeviceToHost, m.stream);
    hook::cudaFreeAsync(&testing::FakeRealFreeAsync, b, m.stream);
    hook::cudaFreeAsync(&testing::FakeRealFreeAsync, c, m.stream);
  }
  s.WaitForWorker();
  EXPECT_GE(a_places.size(), 2u);  // the premise: placement moves
  EXPECT_EQ(s.detector().period(), 4u);
  auto it = trace::ReadKtraceFile(s.trace_path());
  ASSERT_TRUE(it.ok()) << it.status().ToString();
  EXPECT_EQ(it->ops.size(), 4u);
}

TEST_F(SessionTest, UmModeNeitherDetectsNorRecords) {
  Session& s = Start(Mode::kUm);
  Model m;
  m.Init();
  for (int i = 0; i < 10; ++i) m.Step();
  s.WaitForWorker();
  EXPECT_EQ(s.state(), live::State::kUm);
  EXPECT_EQ(s.detector().ops(), 0u);
  EXPECT_TRUE(s.trace_path().empty());
  EXPECT_EQ(s.stats().ops.load(), 60u);
}

TEST_F(SessionTest, ADivergentIterationAbortsTheRecordingWhichHappensLater) {
  Session& s = Start(Mode::kRecord);
  Model m;
  m.Init();
  // Locked at the end of step 2, stable after two more boundaries: step 5 would be recorded. Make it differ.
  for (int i = 0; i < 4; ++i) m.Step();
  m.Step(/*extra_kernel=*/true);
  for (int i = 0; i < 12; ++i) m.Step();
  s.WaitForWorker();
  EXPECT_GE(s.stats().divergences.load(), 1u);
  auto it = trace::ReadKtraceFile(s.trace_path());
  ASSERT_TRUE(it.ok()) << it.status().ToString();
  EXPECT_EQ(it->ops.size(), 6u);
  int live_timing_events = 0;
  for (const auto& e : Fake().events) live_timing_events += e.timing && !e.destroyed;
  EXPECT_EQ(live_timing_events, 0);
}

TEST_F(SessionTest, NvtxMarkersDelimitTheRecordedIteration) {
  Session& s = Start(Mode::kRecord, [](SessionConfig& c) {
    c.iteration_marker = "train_step";
    c.warmup_iterations = 2;
  });
  Model m;
  m.Init();
  for (int i = 0; i < 5; ++i) {
    hook::nvtxRangePushA(&testing::FakeRealRangePush, "other");
    hook::nvtxRangePushA(&testing::FakeRealRangePush, "train_step");
    m.Step(/*extra_kernel=*/i == 2);  // the third marked iteration is the recorded one
  }
  s.WaitForWorker();
  EXPECT_EQ(s.detector().ops(), 0u);  // no automatic detection with markers
  auto it = trace::ReadKtraceFile(s.trace_path());
  ASSERT_TRUE(it.ok()) << it.status().ToString();
  EXPECT_EQ(it->ops.size(), 7u);
  ASSERT_FALSE(it->events.empty());
  EXPECT_EQ(it->events[0].kind, trace::EventKind::kIterationMarker);
  EXPECT_EQ(s.stats().iteration.load(), 5u);
}

TEST_F(SessionTest, ExplicitMarkersReplaceDetection) {
  Session& s = Start(Mode::kRecord, [](SessionConfig& c) { c.warmup_iterations = 0; });
  Model m;
  m.Init();
  m.Step();
  s.OnIterationMarker();
  m.Step(/*extra_kernel=*/true);
  s.OnIterationMarker();
  s.WaitForWorker();
  auto it = trace::ReadKtraceFile(s.trace_path());
  ASSERT_TRUE(it.ok()) << it.status().ToString();
  EXPECT_EQ(it->ops.size(), 7u);
}

TEST_F(SessionTest, AnUnwritableTraceDirectoryIsReportedNotFatal) {
  Session& s = Start(Mode::kRecord, [&](SessionConfig& c) { c.trace_dir = "/proc/karma-cannot-create"; });
  Model m;
  m.Init();
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 12; ++i) m.Step();
  s.WaitForWorker();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("could not be written"), std::string::npos) << err;
  EXPECT_NE(s.SummaryLine().find("trace not written"), std::string::npos) << s.SummaryLine();
  m.Step();  // still running
}

TEST_F(SessionTest, GraphCaptureStopsRecordingAndFreesInsideItAreNotReused) {
  Session& s = Start(Mode::kRecord);
  Model m;
  m.Init();
  m.Step();
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(hook::cudaStreamBeginCapture(&testing::FakeRealBeginCapture, m.stream, cudaStreamCaptureModeGlobal),
            cudaSuccess);
  void* p = m.Alloc(4 << 20);
  const int records_before = Fake().event_records;
  EXPECT_EQ(hook::cudaFreeAsync(&testing::FakeRealFreeAsync, p, m.stream), cudaSuccess);
  EXPECT_EQ(Fake().event_records, records_before);
  ASSERT_EQ(hook::cudaStreamEndCapture(&testing::FakeRealEndCapture, m.stream, nullptr), cudaSuccess);
  ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(s.degraded(Part::kRecording));
  EXPECT_FALSE(s.observing());
  EXPECT_NE(m.Alloc(4 << 20), p);
  for (int i = 0; i < 12; ++i) m.Step();
  s.WaitForWorker();
  EXPECT_TRUE(s.trace_path().empty());
}

TEST_F(SessionTest, LiveViewSegmentIsOwnerOnlyAndRemovedAtShutdown) {
  Session& s = Start(Mode::kUm, [](SessionConfig& c) { c.live_view = true; });
  const std::string path = "/dev/shm/" + live::SegmentName(::getpid());
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  void* p = nullptr;
  ASSERT_EQ(hook::cudaMalloc(&testing::FakeRealMalloc, &p, 3 << 20), cudaSuccess);
  EXPECT_EQ(s.stats().used_bytes.load(), 4u << 20);
  EXPECT_STREQ(s.stats().mode, "um");
  ::testing::internal::CaptureStderr();
  s.Shutdown();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(::stat(path.c_str(), &st), 0);
  EXPECT_NE(err.find("karma: mode um"), std::string::npos) << err;
  EXPECT_NE(err.find("peak 4.00 MiB allocated"), std::string::npos) << err;
}

TEST_F(SessionTest, ThreadsAllocatingAndLaunchingConcurrently) {
  Session& s = Start(Mode::kRecord);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      cudaStream_t stream = reinterpret_cast<cudaStream_t>(0x9000 + t);
      for (int i = 0; i < 200; ++i) {
        void* a = nullptr;
        void* b = nullptr;
        if (hook::cudaMallocAsync(&testing::FakeRealMallocAsync, &a, (1 + i % 7) << 18, stream) != cudaSuccess ||
            hook::cudaMalloc(&testing::FakeRealMalloc, &b, 3 << 20) != cudaSuccess) {
          failures++;
        }
        int n = i;
        void* args[] = {&a, &b, &b, &n};
        if (hook::cudaLaunchKernel(&testing::FakeRealLaunch, &kFwd, dim3(1), dim3(1), args, 0, stream) !=
            cudaSuccess) {
          failures++;
        }
        if (hook::cudaFreeAsync(&testing::FakeRealFreeAsync, a, stream) != cudaSuccess ||
            hook::cudaFree(&testing::FakeRealFree, b) != cudaSuccess) {
          failures++;
        }
        Fake().CompleteAll();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(s.registry().size(), 0u);
  EXPECT_EQ(s.arena().usage().live_bytes, 0u);
  EXPECT_EQ(s.stats().ops.load(), 800u);
}

}  // namespace
}  // namespace karma::rt
