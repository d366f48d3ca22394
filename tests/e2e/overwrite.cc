// e2e_overwrite: kernels on tensors a program carves out of one cudaMalloc block (as a caching allocator does),
// for the profiling iteration's test of which kernels write their pointer's bytes entirely: one that does (and
// stops short of the next pointer), one that updates in place, one that writes past its tensor into the next, one
// that reads indices past the next pointer through its own, and one that updates a tensor in place and writes
// another from the updated values (z += b; a = f(z), as a fused bias and activation does).
// Prints the block's address, then one checksum line per iteration; the host checks nothing itself: the e2e
// case compares the output with a run without libkarma.so and reads the recorded trace.
#include <cuda_runtime_api.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/sim_kernel.h"

namespace {

constexpr int64_t kTensor = 256 << 10;           // bytes between the tensors' starts
constexpr int64_t kFloats = kTensor / 4;         // a whole tensor
constexpr int64_t kShort = 50000;                // floats `scale` writes: 200000 bytes, less than kTensor
constexpr int64_t kPast = kFloats + 1024;        // floats `overrun` writes: 4 KiB into the next tensor
constexpr int64_t kRead = 1024;                  // floats `gather` reads of each input

void Range(simcuda_cost* c, const void* p, int64_t floats) {
  simcuda_add_range(c, p, static_cast<size_t>(floats) * sizeof(float));
}

struct Fill {  // x[i] = small integer from (seed, i)
  static constexpr const char* kName = "overwrite_fill";
  static void Body(int64_t n, uint64_t seed, float* x) {
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((seed * 2654435761u + static_cast<uint64_t>(i)) % 1000);
  }
  static void Cost(simcuda_cost* c, int64_t n, uint64_t, float* x) {
    c->bytes = 4 * static_cast<double>(n);
    Range(c, x, n);
  }
};

// On a GPU, a kernel that moves float4s faults with "misaligned address" (and the CUDA context is lost) when a
// pointer is not 16-byte aligned; simcuda does not model that, so these kernels check it themselves.
void Vectorized(const char* kernel, const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % 16 == 0) return;
  std::fprintf(stderr, "e2e_overwrite: %s: misaligned address %p\n", kernel, p);
  std::abort();
}

struct Scale {  // y[i] = 2 x[i]: writes y without reading it
  static constexpr const char* kName = "overwrite_scale";
  static void Body(int64_t n, const float* x, float* y) {
    Vectorized(kName, x);
    Vectorized(kName, y);
    for (int64_t i = 0; i < n; ++i) y[i] = 2 * x[i];
  }
  static void Cost(simcuda_cost* c, int64_t n, const float* x, float* y) {
    c->bytes = 8 * static_cast<double>(n);
    Range(c, x, n);
    Range(c, y, n);
  }
};

struct Accumulate {  // z[i] += y[i]: reads what it writes
  static constexpr const char* kName = "overwrite_accumulate";
  static void Body(int64_t n, const float* y, float* z) {
    Vectorized(kName, y);
    Vectorized(kName, z);
    for (int64_t i = 0; i < n; ++i) z[i] += y[i];
  }
  static void Cost(simcuda_cost* c, int64_t n, const float* y, float* z) {
    c->bytes = 12 * static_cast<double>(n);
    Range(c, y, n);
    Range(c, z, n);
  }
};

struct Overrun {  // w[i] = x[i % kFloats] + 1 for n > kFloats: past w into the tensor after it
  static constexpr const char* kName = "overwrite_overrun";
  static void Body(int64_t n, const float* x, float* w) {
    for (int64_t i = 0; i < n; ++i) w[i] = x[i % kFloats] + 1;
  }
  static void Cost(simcuda_cost* c, int64_t n, const float* x, float* w) {
    c->bytes = 8 * static_cast<double>(n);
    Range(c, x, kFloats);
    Range(c, w, n);
  }
};

struct Gather {  // s[i] = y[i] + z[i] + w[i] + v[i] for the first kRead elements
  static constexpr const char* kName = "overwrite_gather";
  static void Body(const float* y, const float* z, const float* w, const float* v, float* s) {
    for (int64_t i = 0; i < kRead; ++i) s[i] = y[i] + z[i] + w[i] + v[i];
  }
  static void Cost(simcuda_cost* c, const float* y, const float* z, const float* w, const float* v, float* s) {
    c->bytes = 20 * static_cast<double>(kRead);
    for (const float* p : {y, z, w, v}) Range(c, p, kRead);
    Range(c, s, kRead);
  }
};
struct Indices {  // ix[i] = an index into x (seed, i)
  static constexpr const char* kName = "overwrite_indices";
  static void Body(int64_t n, uint64_t seed, int32_t* ix) {
    for (int64_t i = 0; i < n; ++i) ix[i] = static_cast<int32_t>((seed * 40503u + static_cast<uint64_t>(i) * 7) % kFloats);
  }
  static void Cost(simcuda_cost* c, int64_t n, uint64_t, int32_t* ix) {
    c->bytes = 4 * static_cast<double>(n);
    simcuda_add_range(c, ix, static_cast<size_t>(n) * sizeof(int32_t));
  }
};

// g[i] = x[ix[i]]: reads its indices past the next pointer it knows of (the second half of ix has its own pointer,
// as `tokens[:, 1:]` has beside `tokens[:, :-1]`). On a GPU an index out of range is a device-side assert, which
// ends the context; here the kernel checks it.
struct Lookup {
  static constexpr const char* kName = "overwrite_lookup";
  static void Body(int64_t n, const float* x, const int32_t* ix, float* g) {
    for (int64_t i = 0; i < n; ++i) {
      if (ix[i] < 0 || ix[i] >= kFloats) {
        std::fprintf(stderr, "e2e_overwrite: %s: index %d out of bounds\n", kName, ix[i]);
        std::abort();
      }
      g[i] = x[ix[i]];
    }
  }
  static void Cost(simcuda_cost* c, int64_t n, const float* x, const int32_t* ix, float* g) {
    c->bytes = 12 * static_cast<double>(n);
    Range(c, x, kFloats);
    simcuda_add_range(c, ix, static_cast<size_t>(n) * sizeof(int32_t));
    Range(c, g, n);
  }
};
// u[i] += 1; a[i] = 3 u[i]: updates u, and writes a without reading it, from what it left in u.
struct UpdateWrite {
  static constexpr const char* kName = "overwrite_update_write";
  static void Body(int64_t n, float* u, float* a) {
    for (int64_t i = 0; i < n; ++i) {
      u[i] += 1;
      a[i] = 3 * u[i];
    }
  }
  static void Cost(simcuda_cost* c, int64_t n, float* u, float* a) {
    c->bytes = 12 * static_cast<double>(n);
    Range(c, u, n);
    Range(c, a, n);
  }
};
const apps::Module<Fill, Scale, Accumulate, Overrun, Gather, Indices, Lookup, UpdateWrite> kModule;

int Fail(const char* what) {
  std::fprintf(stderr, "e2e_overwrite: %s failed\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 10;
  // x | y | z | w | v | s | ix | g | u | a, each kTensor bytes from the last. The block is 4 bytes longer, so that the
  // distance from a tensor to the block's end (the room the run on copies gives each pointer) is no multiple of
  // 16: each copy must still keep its tensor's alignment (Scale and Accumulate check it).
  char* block = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&block), 10 * kTensor + 4) != cudaSuccess) return Fail("cudaMalloc");
  auto at = [&](int k) { return reinterpret_cast<float*>(block + k * kTensor); };
  float *x = at(0), *y = at(1), *z = at(2), *w = at(3), *v = at(4), *s = at(5), *g = at(7), *u = at(8), *a = at(9);
  auto* ix = reinterpret_cast<int32_t*>(at(6));
  constexpr int64_t kHalf = kFloats / 2;
  const dim3 grid(64), threads(256);
  apps::Launch<Fill>(grid, threads, nullptr, kFloats, uint64_t{7}, z);
  apps::Launch<Fill>(grid, threads, nullptr, kFloats, uint64_t{9}, u);
  std::printf("block 0x%" PRIx64 "\n", static_cast<uint64_t>(reinterpret_cast<uintptr_t>(block)));
  std::vector<float> host(kRead);
  for (int it = 0; it < iters; ++it) {
    apps::Launch<Fill>(grid, threads, nullptr, kFloats, static_cast<uint64_t>(it), x);
    apps::Launch<Fill>(grid, threads, nullptr, kFloats, static_cast<uint64_t>(it) + 100, v);
    apps::Launch<Scale>(grid, threads, nullptr, kShort, static_cast<const float*>(x), y);
    apps::Launch<Accumulate>(grid, threads, nullptr, kShort, static_cast<const float*>(y), z);
    apps::Launch<Overrun>(grid, threads, nullptr, kPast, static_cast<const float*>(x), w);
    apps::Launch<Gather>(grid, threads, nullptr, static_cast<const float*>(y), static_cast<const float*>(z),
                         static_cast<const float*>(w), static_cast<const float*>(v), s);
    apps::Launch<Indices>(grid, threads, nullptr, kHalf, static_cast<uint64_t>(it), ix);
    apps::Launch<Indices>(grid, threads, nullptr, kHalf, static_cast<uint64_t>(it) + 50, ix + kHalf);
    apps::Launch<Lookup>(grid, threads, nullptr, 2 * kHalf, static_cast<const float*>(x),
                         static_cast<const int32_t*>(ix), g);
    apps::Launch<UpdateWrite>(grid, threads, nullptr, kFloats, u, a);
    if (cudaGetLastError() != cudaSuccess) return Fail("a launch");
    if (cudaMemcpy(host.data(), s, kRead * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) return Fail("copy");
    double sum = 0;
    for (float f : host) sum += f;
    if (cudaMemcpy(host.data(), g + kFloats - kRead, kRead * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
      return Fail("copy");
    }
    double looked_up = 0;
    for (float f : host) looked_up += f;
    if (cudaMemcpy(host.data(), a, kRead * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
      return Fail("copy");
    }
    double updated = 0;
    for (float f : host) updated += f;
    std::printf("iter %d sum %.1f lookup %.1f updated %.1f\n", it, sum, looked_up, updated);
  }
  return cudaFree(block) == cudaSuccess ? 0 : Fail("cudaFree");
}
