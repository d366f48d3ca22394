// A toy training loop on a real GPU for libkarma.so's phase-1 checks: device buffers through cudaMalloc,
// cudaMallocAsync and the driver's cuMemAlloc (looked up through cudaGetDriverEntryPoint), kernels with pointer
// and struct parameters, copies, a memset through the driver's cuMemsetD32Async (looked up likewise) and a host
// synchronization per iteration. Prints a checksum that must
// not change under LD_PRELOAD=libkarma.so, and the time per empty kernel launch.
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                       \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

struct Layer {
  const float* w;
  float* out;
  int n;
};

__global__ void Forward(const float* x, Layer l) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < l.n) l.out[i] = fmaxf(0.f, x[i] * l.w[i] + 0.5f);
}
__global__ void Backward(const float* y, const float* x, float* g, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) g[i] += y[i] * x[i] * 1e-3f;
}
__global__ void Sgd(float* w, const float* g, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] -= 0.01f * g[i];
}
__global__ void Empty() {}

int main(int argc, char** argv) {
  const int n = 1 << 22;  // 16 MiB per buffer
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 12;
  const size_t bytes = n * sizeof(float);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  float* w = nullptr;
  CHECK(cudaMalloc(&w, bytes));
  // A driver-API buffer, through the entry point the runtime hands out (KARMA substitutes its wrapper).
  using MemAlloc = CUresult (*)(CUdeviceptr*, size_t);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  CHECK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &q));
  CUdeviceptr gd = 0;
  if (reinterpret_cast<MemAlloc>(fn)(&gd, bytes) != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuMemAlloc failed\n");
    return 1;
  }
  float* g = reinterpret_cast<float*>(gd);
  // The gradient is zeroed through the driver too, as a library that reaches the driver itself would.
  using MemsetD32Async = CUresult (*)(CUdeviceptr, unsigned int, size_t, CUstream);
  CHECK(cudaGetDriverEntryPointByVersion("cuMemsetD32Async", &fn, 12000, cudaEnableDefault, &q));
  const auto memset_d32 = reinterpret_cast<MemsetD32Async>(fn);
  if (memset_d32 == nullptr) {
    std::fprintf(stderr, "no cuMemsetD32Async entry point\n");
    return 1;
  }
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>((static_cast<long long>(i) * 7919) % 1000) / 1000.f;
  CHECK(cudaMemcpy(w, host.data(), bytes, cudaMemcpyHostToDevice));
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  std::printf("memory: free %.2f GiB of %.2f GiB\n", free_b / 1073741824.0, total_b / 1073741824.0);

  const int threads = 256, blocks = (n + threads - 1) / threads;
  for (int it = 0; it < iterations; ++it) {
    float *x = nullptr, *y = nullptr;
    CHECK(cudaMallocAsync(&x, bytes, s));
    CHECK(cudaMemcpyAsync(x, host.data(), bytes, cudaMemcpyHostToDevice, s));
    CHECK(cudaMallocAsync(&y, bytes, s));
    Forward<<<blocks, threads, 0, s>>>(x, Layer{w, y, n});
    if (memset_d32(gd, 0, n, s) != CUDA_SUCCESS) {
      std::fprintf(stderr, "cuMemsetD32Async failed\n");
      return 1;
    }
    Backward<<<blocks, threads, 0, s>>>(y, x, g, n);
    Sgd<<<blocks, threads, 0, s>>>(w, g, n);
    CHECK(cudaFreeAsync(x, s));
    CHECK(cudaFreeAsync(y, s));
    CHECK(cudaStreamSynchronize(s));
  }
  CHECK(cudaMemcpy(host.data(), w, bytes, cudaMemcpyDeviceToHost));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += host[i] * ((i % 13) + 1);
  std::printf("checksum %.9e\n", sum);

  cudaPointerAttributes a{};
  CHECK(cudaPointerGetAttributes(&a, w));
  std::printf("weights are %s memory\n", a.type == cudaMemoryTypeDevice ? "device" : "non-device");

  // Per-launch cost of interception: many empty kernels.
  const int launches = 200000;
  Empty<<<1, 1, 0, s>>>();
  CHECK(cudaStreamSynchronize(s));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < launches; ++i) Empty<<<1, 1, 0, s>>>();
  const auto t1 = std::chrono::steady_clock::now();
  CHECK(cudaStreamSynchronize(s));
  std::printf("launch: %.0f ns per empty kernel launch (host side)\n",
              std::chrono::duration<double, std::nano>(t1 - t0).count() / launches);
  CHECK(cudaFree(w));
  CHECK(cudaStreamDestroy(s));
  return 0;
}
