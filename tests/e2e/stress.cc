// e2e_stress: four host threads, each on its own stream, allocating, launching, copying and freeing at the same
// time; every value is checked on the host. Run under libkarma.so on a device smaller than the data.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "common/sim_kernel.h"

namespace {

// Small integers: float sums of them are exact, so the host knows every value bit for bit.
float Value(uint64_t seed, int64_t i) { return static_cast<float>((seed * 2654435761u + static_cast<uint64_t>(i)) % 1024); }

struct Fill {
  static constexpr const char* kName = "stress_fill";
  static void Body(int64_t n, uint64_t seed, float* x) {
    for (int64_t i = 0; i < n; ++i) x[i] = Value(seed, i);
  }
  static void Cost(simcuda_cost* c, int64_t n, uint64_t, float* x) {
    c->flops = static_cast<double>(n);
    c->bytes = 4 * static_cast<double>(n);
    simcuda_add_range(c, x, static_cast<size_t>(n) * sizeof(float));
  }
};

struct Add {  // y += x
  static constexpr const char* kName = "stress_add";
  static void Body(int64_t n, const float* x, float* y) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
  }
  static void Cost(simcuda_cost* c, int64_t n, const float* x, float* y) {
    c->flops = static_cast<double>(n);
    c->bytes = 12 * static_cast<double>(n);
    simcuda_add_range(c, x, static_cast<size_t>(n) * sizeof(float));
    simcuda_add_range(c, y, static_cast<size_t>(n) * sizeof(float));
  }
};
const apps::Module<Fill, Add> kModule;

std::atomic<int> failures{0};

void Fail(int t, const char* what) {
  std::fprintf(stderr, "thread %d: %s\n", t, what);
  failures.fetch_add(1);
}

void Worker(int t, int iters, int64_t n) {
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return Fail(t, "stream");
  float* acc = nullptr;  // persistent: sum of every iteration's a
  if (cudaMalloc(reinterpret_cast<void**>(&acc), n * sizeof(float)) != cudaSuccess) return Fail(t, "cudaMalloc");
  if (cudaMemsetAsync(acc, 0, n * sizeof(float), s) != cudaSuccess) return Fail(t, "memset");
  std::vector<float> host(static_cast<size_t>(n));
  for (int it = 0; it < iters; ++it) {
    const uint64_t sa = 1000u * static_cast<uint64_t>(t) + static_cast<uint64_t>(it), sb = sa + 500000u;
    float *a = nullptr, *b = nullptr;
    if (cudaMallocAsync(reinterpret_cast<void**>(&a), n * sizeof(float), s) != cudaSuccess ||
        cudaMallocAsync(reinterpret_cast<void**>(&b), n * sizeof(float), s) != cudaSuccess) {
      return Fail(t, "cudaMallocAsync");
    }
    apps::Launch<Fill>(dim3(64), dim3(256), s, n, sa, a);
    apps::Launch<Fill>(dim3(64), dim3(256), s, n, sb, b);
    apps::Launch<Add>(dim3(64), dim3(256), s, n, static_cast<const float*>(a), b);
    apps::Launch<Add>(dim3(64), dim3(256), s, n, static_cast<const float*>(a), acc);
    if (cudaGetLastError() != cudaSuccess) return Fail(t, "launch");
    if (cudaMemcpyAsync(host.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost, s) != cudaSuccess ||
        cudaFreeAsync(a, s) != cudaSuccess || cudaFreeAsync(b, s) != cudaSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess) {
      return Fail(t, "copy back");
    }
    for (int64_t i = 0; i < n; ++i) {
      if (host[static_cast<size_t>(i)] != Value(sa, i) + Value(sb, i)) return Fail(t, "corrupted iteration result");
    }
  }
  if (cudaMemcpyAsync(host.data(), acc, n * sizeof(float), cudaMemcpyDeviceToHost, s) != cudaSuccess ||
      cudaStreamSynchronize(s) != cudaSuccess) {
    return Fail(t, "final copy");
  }
  for (int64_t i = 0; i < n; ++i) {
    float want = 0;
    for (int it = 0; it < iters; ++it) want += Value(1000u * static_cast<uint64_t>(t) + static_cast<uint64_t>(it), i);
    if (host[static_cast<size_t>(i)] != want) return Fail(t, "corrupted persistent buffer");
  }
  if (cudaFree(acc) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess) Fail(t, "release");
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20;
  const int64_t mib = argc > 2 ? std::atoll(argv[2]) : 4;  // per buffer; three per thread
  const int64_t n = mib * (1 << 20) / static_cast<int64_t>(sizeof(float));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(Worker, t, iters, n);
  for (std::thread& th : threads) th.join();
  if (failures.load() != 0) return 1;
  std::printf("ok: 4 threads x %d iterations, %lld MiB buffers\n", iters, static_cast<long long>(mib));
  return 0;
}
