// Tests through the exported CUDA APIs: registration as nvcc does it, launches, driver entry points, cuBLAS.
#include <cublas_api.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fatbinary_section.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api/process.h"
#include "simcuda/kernel_abi.h"
#include "simcuda/nvcc_entry_points.h"

extern "C" cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                             size_t sharedMem, cudaStream_t stream);

namespace {

// The device is created on first use, by the registration below: configure it first.
const bool kEnvironment = [] {
  setenv("SIMCUDA_GPU", "a100-40g-pcie4", 1);
  setenv("SIMCUDA_MEM", "64MiB", 1);
  return true;
}();

template <typename T>
T Arg(const simcuda_launch* l, int i) {
  return *static_cast<const T*>(l->args[i]);
}

// axpy(int n, float a, const float* x, float* y): y += a * x.
void AxpyBody(const simcuda_launch* l) {
  const int n = Arg<int>(l, 0);
  const float a = Arg<float>(l, 1);
  const float* x = Arg<const float*>(l, 2);
  float* y = Arg<float*>(l, 3);
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}
void MixedBody(const simcuda_launch*) {}

constexpr size_t kAxpySizes[] = {4, 4, 8, 8};
constexpr size_t kMixedSizes[] = {1, 8, 2, 8};  // (char, double, short, void*)
const simcuda_kernel kKernels[] = {
    {"_Z4axpyifPKfPf", 4, kAxpySizes, kAxpySizes, AxpyBody, nullptr},
    {"_Z5mixedcdsPv", 4, kMixedSizes, kMixedSizes, MixedBody, nullptr},
};
const simcuda_module kModule = {SIMCUDA_MODULE_MAGIC, SIMCUDA_MODULE_VERSION, 2, kKernels};
const __fatBinC_Wrapper_t kWrapper = {FATBINC_MAGIC, FATBINC_VERSION,
                                      reinterpret_cast<const unsigned long long*>(&kModule), nullptr};

// Host stubs as nvcc generates them: pop the <<<>>> configuration, launch with the stub's own address.
void axpy(int n, float a, const float* x, float* y) {
  dim3 grid, block;
  size_t shared;
  cudaStream_t stream;
  if (__cudaPopCallConfiguration(&grid, &block, &shared, &stream) != cudaSuccess) return;
  void* args[] = {&n, &a, &x, &y};
  (void)cudaLaunchKernel(reinterpret_cast<const void*>(&axpy), grid, block, args, shared, stream);
}
void mixed(char, double, short, void*) {}

const bool kRegistered = [] {
  void** handle = __cudaRegisterFatBinary(const_cast<__fatBinC_Wrapper_t*>(&kWrapper));
  __cudaRegisterFunction(handle, reinterpret_cast<const char*>(&axpy), nullptr, "_Z4axpyifPKfPf", -1, nullptr,
                         nullptr, nullptr, nullptr, nullptr);
  __cudaRegisterFunction(handle, reinterpret_cast<const char*>(&mixed), nullptr, "_Z5mixedcdsPv", -1, nullptr,
                         nullptr, nullptr, nullptr, nullptr);
  __cudaRegisterFatBinaryEnd(handle);
  return true;
}();

TEST(Api, RegisteredKernelsAnswerNameAndParameterQueries) {
  ASSERT_TRUE(kEnvironment && kRegistered);
  const char* name = nullptr;
  ASSERT_EQ(cudaFuncGetName(&name, reinterpret_cast<const void*>(&axpy)), cudaSuccess);
  EXPECT_STREQ(name, "_Z4axpyifPKfPf");
  const size_t want_offsets[] = {0, 8, 16, 24}, want_sizes[] = {1, 8, 2, 8};
  cudaFunction_t fn = nullptr;
  ASSERT_EQ(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(&mixed)), cudaSuccess);
  for (size_t i = 0; i < 4; ++i) {
    size_t offset = 99, size = 99;
    ASSERT_EQ(cudaFuncGetParamInfo(reinterpret_cast<const void*>(&mixed), i, &offset, &size), cudaSuccess);
    EXPECT_EQ(offset, want_offsets[i]);
    EXPECT_EQ(size, want_sizes[i]);
    offset = size = 99;
    ASSERT_EQ(cuFuncGetParamInfo(reinterpret_cast<CUfunction>(fn), i, &offset, &size), CUDA_SUCCESS);
    EXPECT_EQ(offset, want_offsets[i]);
    EXPECT_EQ(size, want_sizes[i]);
  }
  // Past the last parameter: the error a tool scanning parameters stops at.
  EXPECT_EQ(cudaFuncGetParamInfo(reinterpret_cast<const void*>(&mixed), 4, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuFuncGetParamInfo(reinterpret_cast<CUfunction>(fn), 4, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuFuncGetName(&name, reinterpret_cast<CUfunction>(fn)), CUDA_SUCCESS);
  EXPECT_STREQ(name, "_Z5mixedcdsPv");
  int not_a_kernel = 0;
  EXPECT_EQ(cudaFuncGetName(&name, &not_a_kernel), cudaErrorInvalidDeviceFunction);
  cudaGetLastError();
}

TEST(Api, KernelsLaunchThroughStubsRuntimeAndDriver) {
  const int n = 1000;
  std::vector<float> x(n, 2.0f), y(n, 1.0f);
  float *dx = nullptr, *dy = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dx), n * 4), cudaSuccess);
  ASSERT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&dy), n * 4, cudaMemAttachGlobal), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dy, y.data(), n * 4, cudaMemcpyDefault), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  // axpy<<<4, 256, 0, s>>>(n, 0.5f, dx, dy);
  __cudaPushCallConfiguration(dim3(4), dim3(256), 0, s);
  axpy(n, 0.5f, dx, dy);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  // The same kernel through cuLaunchKernel and through cudaLaunchKernelExC.
  cudaFunction_t fn = nullptr;
  ASSERT_EQ(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(&axpy)), cudaSuccess);
  int count = n;
  float a = 0.25f;
  void* args[] = {&count, &a, &dx, &dy};
  ASSERT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(fn), 4, 1, 1, 256, 1, 1, 0, s, args, nullptr), CUDA_SUCCESS);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(4);
  config.blockDim = dim3(256);
  config.stream = s;
  ASSERT_EQ(cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(&axpy), args), cudaSuccess);
  // Cooperative launches run as the others do (no co-residency limit in the model).
  ASSERT_EQ(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(&axpy), dim3(4), dim3(256), args, 0, s),
            cudaSuccess);
  ASSERT_EQ(cuLaunchCooperativeKernel(reinterpret_cast<CUfunction>(fn), 4, 1, 1, 256, 1, 1, 0, s, args),
            CUDA_SUCCESS);
  // As nvcc 13's <<<>>> launches: the kernel's handle, then __cudaLaunchKernel; and the per-thread-stream forms,
  // whose NULL stream is the thread's own (ordered here by the synchronization in between).
  cudaKernel_t handle = nullptr;
  ASSERT_EQ(__cudaGetKernel(&handle, reinterpret_cast<const void*>(&axpy)), cudaSuccess);
  ASSERT_EQ(__cudaLaunchKernel(handle, dim3(4), dim3(256), args, 0, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(__cudaLaunchKernel_ptsz(handle, dim3(4), dim3(256), args, 0, nullptr), cudaSuccess);
  ASSERT_EQ(cudaLaunchKernel_ptsz(reinterpret_cast<const void*>(&axpy), dim3(4), dim3(256), args, 0, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(y.data(), dy, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(y[0], 1.0f + 1.0f + 0.5f + 0.5f + 5 * 0.5f);
  EXPECT_EQ(y[n - 1], 5.5f);
  int unregistered = 0;
  EXPECT_EQ(cudaLaunchKernel(&unregistered, dim3(1), dim3(1), nullptr, 0, s), cudaErrorInvalidDeviceFunction);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDeviceFunction);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaFree(dx), cudaSuccess);
  ASSERT_EQ(cudaFree(dy), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(Api, DriverEntryPointsResolveKnownNamesOnly) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  ASSERT_EQ(cuGetProcAddress_v2("cuMemAlloc", &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void*>(&cuMemAlloc_v2));
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
  ASSERT_EQ(cuGetProcAddress_v2("cuLaunchKernel", &p, 12000, 0, &st), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void*>(&cuLaunchKernel));
  ASSERT_EQ(cuGetProcAddress_v2("cuGetProcAddress", &p, 13000, 0, &st), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void*>(&cuGetProcAddress_v2));
  ASSERT_EQ(cuGetProcAddress_v2("cuMemPrefetchAsync", &p, 13000, 0, &st), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void*>(&cuMemPrefetchAsync_v2));
  for (const char* unknown : {"cuNoSuchFunction", "malloc", "cudaMalloc", "cudnnCreate"}) {
    p = &st;
    st = CU_GET_PROC_ADDRESS_SUCCESS;
    EXPECT_EQ(cuGetProcAddress_v2(unknown, &p, 13000, 0, &st), CUDA_ERROR_NOT_FOUND) << unknown;
    EXPECT_EQ(p, nullptr) << unknown;
    EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) << unknown;
  }
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &p, 99000, 0, &st), CUDA_ERROR_INVALID_VALUE);
  // Per-thread-default-stream lookups get the _ptsz / _ptds form where there is one.
  const uint64_t ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  ASSERT_EQ(cuGetProcAddress_v2("cuMemsetD32Async", &p, 13000, ptds, &st), CUDA_SUCCESS);
  EXPECT_EQ(p, dlsym(RTLD_DEFAULT, "cuMemsetD32Async_ptsz"));
  ASSERT_EQ(cuGetProcAddress_v2("cuMemcpyHtoD", &p, 13000, ptds, &st), CUDA_SUCCESS);
  EXPECT_EQ(p, dlsym(RTLD_DEFAULT, "cuMemcpyHtoD_v2_ptds"));
  ASSERT_EQ(cuGetProcAddress_v2("cuMemcpyHtoD", &p, 13000, 0, &st), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void*>(&cuMemcpyHtoD_v2));
  ASSERT_EQ(cuGetProcAddress_v2("cuMemcpyDtoDAsync", &p, 13000, 0, &st), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void*>(&cuMemcpyDtoDAsync_v2));
  // cuMemcpyBatchAsync: CUDA 12.8's ABI under its plain name, 13.0's as _v2.
  ASSERT_EQ(cuGetProcAddress_v2("cuMemcpyBatchAsync", &p, 12080, 0, &st), CUDA_SUCCESS);
  EXPECT_EQ(p, dlsym(RTLD_DEFAULT, "cuMemcpyBatchAsync"));
  ASSERT_EQ(cuGetProcAddress_v2("cuMemcpyBatchAsync", &p, 13000, ptds, &st), CUDA_SUCCESS);
  EXPECT_EQ(p, dlsym(RTLD_DEFAULT, "cuMemcpyBatchAsync_v2_ptsz"));
  ASSERT_EQ(cuGetProcAddress_v2("cuLaunchKernel", &p, 13000, ptds, &st), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void*>(&cuLaunchKernel));  // no _ptsz form here: the launch names its stream

  // The runtime's lookups return the driver's functions; unknown names are success with a null pointer.
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &p, 13000, cudaEnableDefault, &q), cudaSuccess);
  EXPECT_EQ(p, reinterpret_cast<void*>(&cuLaunchKernel));
  EXPECT_EQ(q, cudaDriverEntryPointSuccess);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ASSERT_EQ(cudaGetDriverEntryPoint("cuMemGetInfo", &p, cudaEnableDefault, &q), cudaSuccess);
  EXPECT_EQ(p, reinterpret_cast<void*>(&cuMemGetInfo_v2));
  p = &q;
  ASSERT_EQ(cudaGetDriverEntryPoint("cuNoSuchFunction", &p, cudaEnableDefault, &q), cudaSuccess);
#pragma GCC diagnostic pop
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(q, cudaDriverEntryPointSymbolNotFound);
}

// The driver's copies and fills, each form: what lands on the device and back, element patterns, alignment.
TEST(Api, DriverCopiesAndMemsets) {
  constexpr size_t kBytes = 64 << 10;
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocManaged(&b, kBytes, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  std::vector<uint8_t> host(kBytes);
  auto read_back = [&](CUdeviceptr from) {
    std::fill(host.begin(), host.end(), 0);
    EXPECT_EQ(cuMemcpyDtoH_v2(host.data(), from, kBytes), CUDA_SUCCESS);
  };
  auto word = [&](size_t offset) {
    uint32_t w = 0;
    std::memcpy(&w, host.data() + offset, 4);
    return w;
  };

  ASSERT_EQ(cuMemsetD32_v2(a, 0x11223344u, kBytes / 4), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD16Async(a + 6, 0xabcd, 3, s), CUDA_SUCCESS);  // bytes 6-11
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  using SetD8 = CUresult (*)(CUdeviceptr, unsigned char, size_t);
  auto set_d8_ptds = reinterpret_cast<SetD8>(dlsym(RTLD_DEFAULT, "cuMemsetD8_v2_ptds"));
  ASSERT_NE(set_d8_ptds, nullptr);
  ASSERT_EQ(set_d8_ptds(a + 12, 0x7f, 2), CUDA_SUCCESS);  // bytes 12-13
  read_back(a);
  EXPECT_EQ(word(0), 0x11223344u);
  EXPECT_EQ(word(4), 0xabcd3344u);
  EXPECT_EQ(word(8), 0xabcdabcdu);
  EXPECT_EQ(word(12), 0x11227f7fu);
  EXPECT_EQ(word(kBytes - 4), 0x11223344u);
  EXPECT_EQ(cuMemsetD32Async(a + 2, 0, 1, s), CUDA_ERROR_INVALID_VALUE);  // not aligned to the element
  EXPECT_EQ(cuMemsetD16_v2(a + 1, 0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD8_v2(a + kBytes - 1, 0, 2), CUDA_ERROR_INVALID_VALUE);  // past the allocation

  // Host -> a (per-thread stream, null), a -> b (a stream), b -> host (unified addressing): the bytes survive.
  std::vector<uint8_t> pattern(kBytes);
  for (size_t i = 0; i < kBytes; ++i) pattern[i] = static_cast<uint8_t>(i * 7 + 3);
  using CopyHtoDAsync = CUresult (*)(CUdeviceptr, const void*, size_t, CUstream);
  auto h2d_ptsz = reinterpret_cast<CopyHtoDAsync>(dlsym(RTLD_DEFAULT, "cuMemcpyHtoDAsync_v2_ptsz"));
  ASSERT_NE(h2d_ptsz, nullptr);
  ASSERT_EQ(h2d_ptsz(a, pattern.data(), kBytes, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync_v2(b, a, kBytes, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  std::vector<uint8_t> out(kBytes);
  ASSERT_EQ(cuMemcpy(reinterpret_cast<CUdeviceptr>(out.data()), b, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(out, pattern);
  ASSERT_EQ(cuMemsetD8Async(b, 0, kBytes, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD_v2(a, b, kBytes / 2), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyAsync(b, reinterpret_cast<CUdeviceptr>(pattern.data()), 16, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(out.data(), b, kBytes, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_TRUE(std::equal(out.begin(), out.begin() + 16, pattern.begin()));
  EXPECT_TRUE(std::all_of(out.begin() + 16, out.end(), [](uint8_t v) { return v == 0; }));
  read_back(a);
  EXPECT_TRUE(std::all_of(host.begin(), host.begin() + kBytes / 2, [](uint8_t v) { return v == 0; }));
  EXPECT_TRUE(std::equal(host.begin() + kBytes / 2, host.end(), pattern.begin() + kBytes / 2));

  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
}

// Batches of copies, the runtime's and the driver's (both ABIs): the copies land; the checks both make.
TEST(Api, BatchedCopies) {
  constexpr size_t kBytes = 8 << 10;
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, kBytes), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::vector<uint8_t> x(kBytes), y(kBytes), out(2 * kBytes);
  for (size_t i = 0; i < kBytes; ++i) {
    x[i] = static_cast<uint8_t>(i * 3 + 1);
    y[i] = static_cast<uint8_t>(i * 5 + 2);
  }
  cudaMemcpyAttributes attrs{};
  attrs.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t first = 0;
  void* dsts[] = {a, b};
  const void* srcs[] = {x.data(), y.data()};
  const size_t sizes[] = {kBytes, kBytes};
  ASSERT_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attrs, &first, 1, s), cudaSuccess);
  // Back through the driver's: 13.0's ABI on the stream, 12.8's on the per-thread default stream.
  CUmemcpyAttributes dattrs{};
  dattrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  CUdeviceptr back_dsts[] = {reinterpret_cast<CUdeviceptr>(out.data())};
  CUdeviceptr back_srcs[] = {reinterpret_cast<CUdeviceptr>(a)};
  size_t back_sizes[] = {kBytes};
  ASSERT_EQ(cuMemcpyBatchAsync_v2(back_dsts, back_srcs, back_sizes, 1, &dattrs, &first, 1, s), CUDA_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  using Batch128 = CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t, CUmemcpyAttributes*, size_t*, size_t,
                                size_t*, CUstream);
  auto batch_128 = reinterpret_cast<Batch128>(dlsym(RTLD_DEFAULT, "cuMemcpyBatchAsync_ptsz"));
  ASSERT_NE(batch_128, nullptr);
  back_dsts[0] = reinterpret_cast<CUdeviceptr>(out.data() + kBytes);
  back_srcs[0] = reinterpret_cast<CUdeviceptr>(b);
  size_t fail = 7;
  ASSERT_EQ(batch_128(back_dsts, back_srcs, back_sizes, 1, &dattrs, &first, 1, &fail, CU_STREAM_PER_THREAD),
            CUDA_SUCCESS);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(fail, 0u);
  EXPECT_TRUE(std::equal(x.begin(), x.end(), out.begin()));
  EXPECT_TRUE(std::equal(y.begin(), y.end(), out.begin() + kBytes));

  // The legacy default stream is refused, the per-thread one taken; the attributes are checked.
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attrs, &first, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attrs, &first, 1, cudaStreamPerThread), cudaSuccess);
  size_t second = 1;
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attrs, &second, 1, s), cudaErrorInvalidValue);
  cudaMemcpyAttributes unordered{};
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &unordered, &first, 1, s), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 0, &attrs, &first, 1, s), cudaErrorInvalidValue);
  auto batch_128_legacy = reinterpret_cast<Batch128>(dlsym(RTLD_DEFAULT, "cuMemcpyBatchAsync"));
  ASSERT_NE(batch_128_legacy, nullptr);
  fail = 7;
  EXPECT_EQ(batch_128_legacy(back_dsts, back_srcs, back_sizes, 1, &dattrs, &first, 1, &fail, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fail, SIZE_MAX);
  fail = 7;  // the _ptsz form's null stream is the thread's
  EXPECT_EQ(batch_128(back_dsts, back_srcs, back_sizes, 1, &dattrs, &first, 1, &fail, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fail, 0u);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
}

// C = A * B on the host, summed in the same order as simcuda's GEMM.
std::vector<float> Multiply(const std::vector<float>& a, const std::vector<float>& b, int m, int n, int k) {
  std::vector<float> c(static_cast<size_t>(m) * n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      float acc = 0;
      for (int p = 0; p < k; ++p) acc += a[i + p * m] * b[p + j * k];
      c[i + j * m] = acc;
    }
  }
  return c;
}

TEST(Api, CublasGemmsRunAsKernelsOnTheDevice) {
  const int m = 48, n = 20, k = 33, batch = 3;
  std::vector<float> a(m * k * batch), b(k * n * batch);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 17) * 0.125f - 1;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 13) * 0.25f - 1.5f;
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  ASSERT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&da), a.size() * 4, cudaMemAttachGlobal), cudaSuccess);
  ASSERT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&db), b.size() * 4, cudaMemAttachGlobal), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dc), m * n * batch * 4), cudaSuccess);
  std::memcpy(da, a.data(), a.size() * 4);  // managed memory is host-accessible
  std::memcpy(db, b.data(), b.size() * 4);
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate_v2(&h), CUBLAS_STATUS_SUCCESS);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cublasSetStream_v2(h, s), CUBLAS_STATUS_SUCCESS);
  const simcuda::Stats before = simcuda::Global()->GetStats();
  const float one = 1, zero = 0;
  ASSERT_EQ(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, m, db, k, &zero, dc, m),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> c(m * n * batch);
  ASSERT_EQ(cudaMemcpy(c.data(), dc, m * n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  const auto want = Multiply(a, b, m, n, k);
  EXPECT_EQ(std::memcmp(c.data(), want.data(), want.size() * 4), 0);
  const simcuda::Stats after = simcuda::Global()->GetStats();
  EXPECT_EQ(after.kernels, before.kernels + 1);
  EXPECT_EQ(after.faults, before.faults + 2);  // A and B, one managed page each, touched by the GEMM

  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_32F, m, db, CUDA_R_32F, k, &zero, dc,
                         CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, CUDA_R_16F, m, db, CUDA_R_16F, k, &zero,
                         dc, CUDA_R_16F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_SUPPORTED);
  ASSERT_EQ(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, m, m * k, db, k, k * n, &zero,
                                      dc, m, m * n, batch),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < batch; ++i) {
    const std::vector<float> ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
    const std::vector<float> bi(b.begin() + i * k * n, b.begin() + (i + 1) * k * n);
    const auto wi = Multiply(ai, bi, m, n, k);
    EXPECT_EQ(std::memcmp(c.data() + i * m * n, wi.data(), wi.size() * 4), 0) << i;
  }
  EXPECT_EQ(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, da, m - 1, db, k, &zero, dc, m),
            CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_EQ(cublasDestroy_v2(h), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaFree(da), cudaSuccess);
  ASSERT_EQ(cudaFree(db), cudaSuccess);
  ASSERT_EQ(cudaFree(dc), cudaSuccess);
}

TEST(Api, DeviceIdentityCapacityAndErrors) {
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_NE(std::string(prop.name).find("A100"), std::string::npos);
  EXPECT_EQ(prop.totalGlobalMem, 64u << 20);
  EXPECT_EQ(prop.concurrentManagedAccess, 1);
  int v = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrConcurrentManagedAccess, 0), cudaSuccess);
  EXPECT_EQ(v, 1);
  ASSERT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 8);
  size_t total = 0, free_bytes = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, 64u << 20);

  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 65u << 20), cudaErrorMemoryAllocation);
  EXPECT_STREQ(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  CUdeviceptr dp = 0;
  EXPECT_EQ(cuMemAlloc_v2(&dp, 65u << 20), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemAlloc_v2(&dp, 10u << 20), CUDA_SUCCESS);
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_EQ(free_bytes, 54u << 20);
  ASSERT_EQ(cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes, 54u << 20);
  ASSERT_EQ(cuMemFree_v2(dp), CUDA_SUCCESS);
  // A function simcuda does not implement answers "not supported" instead of crashing.
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaGraphCreate(&graph, 0), cudaErrorNotSupported);
}

TEST(Api, ManagedMemoryPrefetchAndDiscardThroughBothApis) {
  const size_t bytes = 4 << 20;  // two pages
  float* m = nullptr;
  ASSERT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&m), bytes, cudaMemAttachGlobal), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(m, 0, bytes, s), cudaSuccess);  // populates both pages on the device
  const simcuda::Stats before = simcuda::Global()->GetStats();
  cudaMemLocation host{cudaMemLocationTypeHost, 0}, gpu{cudaMemLocationTypeDevice, 0};
  ASSERT_EQ(cudaMemPrefetchAsync(m, bytes, host, 0, s), cudaSuccess);
  ASSERT_EQ(cudaMemPrefetchAsync(m, bytes, gpu, 0, s), cudaSuccess);
  EXPECT_EQ(cudaMemPrefetchAsync(m, bytes, gpu, 1, s), cudaErrorInvalidValue);  // flags must be 0
  CUmemLocation cu_host{CU_MEM_LOCATION_TYPE_HOST, 0};
  ASSERT_EQ(cuMemPrefetchAsync_v2(reinterpret_cast<CUdeviceptr>(m), bytes, cu_host, 0, s), CUDA_SUCCESS);
  simcuda::Stats after = simcuda::Global()->GetStats();
  EXPECT_EQ(after.prefetched_bytes - before.prefetched_bytes, bytes);
  EXPECT_EQ(after.prefetched_to_host_bytes - before.prefetched_to_host_bytes, 2 * bytes);

  void* ptrs[] = {m};
  size_t sizes[] = {bytes};
  size_t first[] = {0};
  EXPECT_EQ(cudaMemDiscardAndPrefetchBatchAsync(ptrs, sizes, 1, &gpu, first, 1, 0, nullptr), cudaErrorInvalidValue);
  ASSERT_EQ(cudaMemDiscardAndPrefetchBatchAsync(ptrs, sizes, 1, &gpu, first, 1, 0, s), cudaSuccess);
  EXPECT_TRUE(std::isnan(m[0]) && std::isnan(m[bytes / 4 - 1]));
  after = simcuda::Global()->GetStats();
  EXPECT_EQ(after.prefetched_bytes - before.prefetched_bytes, bytes);  // discarded pages move nothing
  EXPECT_EQ(after.managed_resident_bytes, bytes);
  CUdeviceptr cu_ptrs[] = {reinterpret_cast<CUdeviceptr>(m)};
  ASSERT_EQ(cuMemDiscardBatchAsync(cu_ptrs, sizes, 1, 0, s), CUDA_SUCCESS);
  EXPECT_EQ(simcuda::Global()->GetStats().managed_resident_bytes, 0u);
  ASSERT_EQ(cudaMemAdvise(m, bytes, cudaMemAdviseSetReadMostly, gpu), cudaSuccess);
  ASSERT_EQ(cudaFree(m), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

void Note(void* flag) { *static_cast<int*>(flag) += 1; }

TEST(Api, HostFunctionsRunInStreamOrder) {
  int calls = 0;
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(s, &Note, &calls), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(cudaStreamPerThread, &Note, &calls), cudaSuccess);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cudaLaunchHostFunc(s, nullptr, &calls), cudaErrorInvalidValue);
  unsigned long long id1 = 0, id2 = 0;
  ASSERT_EQ(cudaStreamGetId(s, &id1), cudaSuccess);
  ASSERT_EQ(cudaStreamGetId(cudaStreamPerThread, &id2), cudaSuccess);
  EXPECT_NE(id1, id2);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaStreamGetId(s, &id1), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
}

// CUDA's virtual memory management through libcuda: every wrong call returns the error the driver documents
// (CUDA_ERROR_INVALID_VALUE for sizes and addresses off the granularity, a mapping over a mapping, a part of a
// mapping unmapped, access set where nothing is mapped), releasing a mapped handle is legal and the memory goes
// with its last mapping, and the calls are reachable through cuGetProcAddress.
TEST(Api, VirtualMemoryCallsCheckAsTheDriverDocuments) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  size_t g = 0;
  ASSERT_EQ(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  EXPECT_EQ(g, 2u << 20);
  ASSERT_EQ(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
  EXPECT_EQ(g, 2u << 20);
  int supported = 0;
  ASSERT_EQ(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0), CUDA_SUCCESS);
  EXPECT_EQ(supported, 1);
  ASSERT_EQ(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(supported, 1);

  CUdeviceptr base = 0;
  EXPECT_EQ(cuMemAddressReserve(&base, 3u << 20, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAddressReserve(&base, 4u << 20, 0, 0, 1), CUDA_ERROR_INVALID_VALUE);  // flags must be 0
  ASSERT_EQ(cuMemAddressReserve(&base, 8u << 20, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle a = 0, b = 0, host = 0;
  EXPECT_EQ(cuMemCreate(&a, 1u << 20, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemCreate(&a, 2u << 20, &prop, 1), CUDA_ERROR_INVALID_VALUE);
  CUmemAllocationProp bad = prop;
  bad.location.id = 1;
  EXPECT_EQ(cuMemCreate(&a, 2u << 20, &bad, 0), CUDA_ERROR_INVALID_DEVICE);
  bad.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0};
  EXPECT_EQ(cuMemCreate(&a, 2u << 20, &bad, 0), CUDA_ERROR_INVALID_VALUE);
  bad.location = {CU_MEM_LOCATION_TYPE_HOST, 0};
  bad.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;  // host chunks are not IPC capable
  EXPECT_EQ(cuMemCreate(&a, 2u << 20, &bad, 0), CUDA_ERROR_INVALID_VALUE);
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo(&free0, &total), CUDA_SUCCESS);
  ASSERT_EQ(cuMemCreate(&a, 2u << 20, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemCreate(&b, 4u << 20, &prop, 0), CUDA_SUCCESS);
  CUmemAllocationProp on_host = prop;
  on_host.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  ASSERT_EQ(cuMemCreate(&host, 2u << 20, &on_host, 0), CUDA_SUCCESS);
  size_t free1 = 0;
  ASSERT_EQ(cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free0 - free1, 6u << 20);  // the device chunks, not the host one

  EXPECT_EQ(cuMemMap(base + (1u << 20), 2u << 20, 0, a, 0), CUDA_ERROR_INVALID_VALUE);  // off the granularity
  EXPECT_EQ(cuMemMap(base, 2u << 20, 0, a, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemMap(base, 2u << 20, 0, a, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(base, 2u << 20, 0, host, 0), CUDA_ERROR_INVALID_VALUE);  // over a mapping
  ASSERT_EQ(cuMemMap(base + (2u << 20), 4u << 20, 0, b, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(base + (6u << 20), 2u << 20, 0, host, 0), CUDA_SUCCESS);
  CUmemAccessDesc rw{};
  rw.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr other = 0;
  ASSERT_EQ(cuMemAddressReserve(&other, 2u << 20, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemSetAccess(other, 2u << 20, &rw, 1), CUDA_ERROR_INVALID_VALUE);  // nothing mapped there
  EXPECT_EQ(cuMemSetAccess(base + (2u << 20), 2u << 20, &rw, 1), CUDA_ERROR_INVALID_VALUE);  // part of a mapping
  CUmemAccessDesc elsewhere = rw;
  elsewhere.location.id = 3;
  EXPECT_EQ(cuMemSetAccess(base, 2u << 20, &elsewhere, 1), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_EQ(cuMemSetAccess(base, 8u << 20, &rw, 1), CUDA_SUCCESS);  // three whole mappings at once
  unsigned long long flags = 0;
  ASSERT_EQ(cuMemGetAccess(&flags, &rw.location, base + (7u << 20)), CUDA_SUCCESS);
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  EXPECT_EQ(cuMemGetAccess(&flags, &rw.location, other), CUDA_ERROR_INVALID_VALUE);

  // The mapped memory is memory: a copy through it, and a pointer query.
  std::vector<char> in(4096, 42), out(4096, 0);
  ASSERT_EQ(cuMemcpyHtoD(base + (3u << 20), in.data(), in.size()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(out.data(), base + (3u << 20), out.size()), CUDA_SUCCESS);
  EXPECT_EQ(out, in);

  CUmemGenericAllocationHandle retained = 0;
  ASSERT_EQ(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base + (5u << 20))), CUDA_SUCCESS);
  EXPECT_EQ(retained, b);
  ASSERT_EQ(cuMemRelease(retained), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(other)), CUDA_ERROR_INVALID_VALUE);
  CUmemAllocationProp got{};
  ASSERT_EQ(cuMemGetAllocationPropertiesFromHandle(&got, host), CUDA_SUCCESS);
  EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_HOST_NUMA);

  EXPECT_EQ(cuMemUnmap(base + (2u << 20), 2u << 20), CUDA_ERROR_INVALID_VALUE);  // part of a mapping
  ASSERT_EQ(cuMemRelease(a), CUDA_SUCCESS);  // mapped: legal, the memory stays until the mapping goes
  size_t free2 = 0;
  ASSERT_EQ(cuMemGetInfo(&free2, &total), CUDA_SUCCESS);
  EXPECT_EQ(free2, free1);
  EXPECT_EQ(cuMemAddressFree(base, 8u << 20), CUDA_ERROR_INVALID_VALUE);  // still mapped
  ASSERT_EQ(cuMemUnmap(base, 8u << 20), CUDA_SUCCESS);                    // every mapping of the range
  ASSERT_EQ(cuMemGetInfo(&free2, &total), CUDA_SUCCESS);
  EXPECT_EQ(free2, free1 + (2u << 20));  // a went with its mapping; b is still held by its handle
  ASSERT_EQ(cuMemRelease(b), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(host), CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetInfo(&free2, &total), CUDA_SUCCESS);
  EXPECT_EQ(free2, free0);
  EXPECT_EQ(cuMemAddressFree(base, 4u << 20), CUDA_ERROR_INVALID_VALUE);  // not the reserved size
  ASSERT_EQ(cuMemAddressFree(base, 8u << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(other, 2u << 20), CUDA_SUCCESS);

  for (const char* name : {"cuMemAddressReserve", "cuMemCreate", "cuMemMap", "cuMemSetAccess", "cuMemUnmap",
                           "cuMemRelease", "cuMemGetAllocationGranularity", "cuMemRetainAllocationHandle"}) {
    void* fn = nullptr;
    EXPECT_EQ(cuGetProcAddress(name, &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr), CUDA_SUCCESS) << name;
    EXPECT_NE(fn, nullptr) << name;
  }
}

// Stream memory operations through libcuda, reached as cuda.h names them (the _v2 ABI) and by lookup.
TEST(Api, StreamMemoryOperations) {
  CUdeviceptr dflags = 0;
  ASSERT_EQ(cuMemAlloc(&dflags, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32(dflags, 0, 16), CUDA_SUCCESS);
  uint32_t* flags = nullptr;  // what the device holds, read back through pinned memory
  ASSERT_EQ(cuMemHostAlloc(reinterpret_cast<void**>(&flags), 64, 0), CUDA_SUCCESS);
  const auto read = [&] { ASSERT_EQ(cuMemcpyDtoH(flags, dflags, 64), CUDA_SUCCESS); };
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const auto at = [&](int i) { return dflags + 8 * i; };
  ASSERT_EQ(cuStreamWriteValue32(s, at(0), 5, 0), CUDA_SUCCESS);
  read();
  EXPECT_EQ(flags[0], 5u);
  ASSERT_EQ(cuStreamWaitValue32(s, at(0), 3, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);  // already true
  ASSERT_EQ(cuStreamWriteValue64(s, at(1), 1ull << 40, 0), CUDA_SUCCESS);
  read();
  EXPECT_EQ(flags[2] | uint64_t{flags[3]} << 32, 1ull << 40);
  CUstreamBatchMemOpParams ops[2]{};
  ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  ops[0].writeValue.address = at(2);
  ops[0].writeValue.value = 9;
  ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  ops[1].waitValue.address = at(2);
  ops[1].waitValue.value = 9;
  ops[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  ASSERT_EQ(cuStreamBatchMemOp(s, 2, ops, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  read();
  EXPECT_EQ(flags[4], 9u);
  EXPECT_EQ(cuStreamWriteValue32(s, at(0) + 1, 1, 0), CUDA_ERROR_INVALID_VALUE);  // misaligned
  uint32_t pageable = 0;
  EXPECT_EQ(cuStreamWriteValue32(s, reinterpret_cast<uintptr_t>(&pageable), 1, 0), CUDA_ERROR_INVALID_VALUE);
  // Pinned host memory is refused, as an H200's driver refused it.
  EXPECT_EQ(cuStreamWriteValue32(s, reinterpret_cast<uintptr_t>(flags), 1, 0), CUDA_ERROR_INVALID_VALUE);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  ASSERT_EQ(cuGetProcAddress("cuStreamWaitValue32", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, dlsym(RTLD_DEFAULT, "cuStreamWaitValue32_v2"));
  ASSERT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(dflags), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeHost(flags), CUDA_SUCCESS);
}

TEST(Api, EventsMeasureVirtualTime) {
  // 24 MB of pinned memory at the A100 profile's 24 GB/s: 1 ms on the host-to-device engine.
  const uint64_t pageable_before = simcuda::Global()->GetStats().pageable_bytes;  // earlier tests' copies
  char* host = nullptr;
  const size_t bytes = 24000000;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&host), bytes), cudaSuccess);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
  cudaEvent_t start = nullptr, stop = nullptr;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(start, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, nullptr), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(stop, nullptr), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(stop), cudaErrorNotReady);  // the call returned before its copy ended
  ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
  const double call_ms = 1e3 * simcuda::Global()->config().profile.host.order_call_s;  // the host records `start`
  float ms = 0;
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
  EXPECT_NEAR(ms, call_ms + 1.0f, 1e-5);
  // From pageable memory: at the profile's pageable rate (8 GB/s: 3 ms), and the call returns only when done.
  std::vector<char> pageable(bytes);
  ASSERT_EQ(cudaEventRecord(start, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d, pageable.data(), bytes, cudaMemcpyHostToDevice, nullptr), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(stop, nullptr), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(stop), cudaSuccess);
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
  EXPECT_NEAR(ms, call_ms + 3.0f, 1e-5);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  ASSERT_EQ(cudaFreeHost(host), cudaSuccess);
  const std::string json = simcuda::Global()->StatsJson();
  EXPECT_NE(json.find("\"profile\": \"a100-40g-pcie4\""), std::string::npos);
  EXPECT_NE(json.find("\"peak_device_bytes\""), std::string::npos);
  EXPECT_NE(json.find("\"pageable_bytes\": " + std::to_string(pageable_before + 24000000)), std::string::npos) << json;
}

}  // namespace
