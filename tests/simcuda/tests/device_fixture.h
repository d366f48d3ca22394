// The device model's test fixture: a round-number profile, a few test kernels, and helpers over one Device.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "device/device.h"

namespace simcuda::testing {

constexpr uint64_t kMiB = 1ull << 20;
constexpr double kEps = 1e-12;

// Round figures so expected times can be worked out by hand: 1 MB copies in 1 ms, 1e9 flops take 1 ms.
inline karma::policy::HwProfile TestProfile() {
  return {.name = "test",
          .description = "round numbers",
          .memory_bytes = 64 * kMiB,
          .flops_per_s = 1e12,
          .memory_bw = 1e11,
          .copy = {1e9, 1e9},     // pinned copies: 1 MB in 1 ms each way
          .managed = {1e9, 1e9},  // managed prefetches and evictions likewise
          .pageable_bw = 5e8,
          .fault_latency_s = 1e-5,
          .fault_bw = 5e8,
          .kernel_launch_s = 0.0};  // host calls cost nothing unless a test gives them a cost
}

inline Config TestConfig(uint64_t capacity = 64 * kMiB) {
  Config c = Config::ForProfile(TestProfile());
  c.capacity_bytes = capacity;
  return c;
}

inline const double kPage = static_cast<double>(kPageBytes);

// ---- test kernels ---------------------------------------------------------------------------------------

template <typename T>
T Arg(const simcuda_launch* l, int i) {
  return *static_cast<const T*>(l->args[i]);
}

// busy(double flops): no memory, `flops` of work.
inline void BusyBody(const simcuda_launch*) {}
inline void BusyCost(const simcuda_launch* l, simcuda_cost* c) { c->flops = Arg<double>(l, 0); }

// touch(const void* p, size_t bytes): pages of [p, p+bytes) must be resident; no work.
inline void TouchBody(const simcuda_launch*) {}
inline void TouchCost(const simcuda_launch* l, simcuda_cost* c) {
  simcuda_add_range(c, Arg<const void*>(l, 0), Arg<size_t>(l, 1));
}

// sum(const float* x, size_t n, float* out): *out = x[0] + ... + x[n-1].
inline void SumBody(const simcuda_launch* l) {
  const float* x = Arg<const float*>(l, 0);
  float s = 0;
  for (size_t i = 0; i < Arg<size_t>(l, 1); ++i) s += x[i];
  *Arg<float*>(l, 2) = s;
}
inline void SumCost(const simcuda_launch* l, simcuda_cost* c) {
  simcuda_add_range(c, Arg<const float*>(l, 0), Arg<size_t>(l, 1) * sizeof(float));
  simcuda_add_range(c, Arg<float*>(l, 2), sizeof(float));
}

// plain(void* p): no cost function, so it touches the whole allocation p points into.
inline void PlainBody(const simcuda_launch*) {}

constexpr size_t kOne8[] = {8};
constexpr size_t kTwo8[] = {8, 8};
constexpr size_t kThree8[] = {8, 8, 8};
const simcuda_kernel kKernels[] = {
    {"busy", 1, kOne8, kOne8, BusyBody, BusyCost},
    {"touch", 2, kTwo8, kTwo8, TouchBody, TouchCost},
    {"sum", 3, kThree8, kThree8, SumBody, SumCost},
    {"plain", 1, kOne8, kOne8, PlainBody, nullptr},
};
const simcuda_module kModule = {SIMCUDA_MODULE_MAGIC, SIMCUDA_MODULE_VERSION, 4, kKernels};

class DeviceTest : public ::testing::Test {
 protected:
  void Init(Config config) {
    dev_ = std::make_unique<Device>(std::move(config));
    ASSERT_TRUE(dev_->ok());
    CUmod_st* m = dev_->kernels().Load(&kModule);
    busy_ = dev_->kernels().Find(m, "busy");
    touch_ = dev_->kernels().Find(m, "touch");
    sum_ = dev_->kernels().Find(m, "sum");
    plain_ = dev_->kernels().Find(m, "plain");
  }
  void SetUp() override { Init(TestConfig()); }

  cudaError_t Busy(double seconds, cudaStream_t s) {
    double flops = seconds * 1e12;
    void* args[] = {&flops};
    return dev_->Launch(busy_, {dim3(1), dim3(1), 0}, args, s);
  }
  cudaError_t Touch(const void* p, size_t bytes, cudaStream_t s = nullptr) {
    void* args[] = {&p, &bytes};
    return dev_->Launch(touch_, {dim3(1), dim3(1), 0}, args, s);
  }
  cudaStream_t Stream(unsigned flags = cudaStreamNonBlocking) {
    cudaStream_t s = nullptr;
    EXPECT_EQ(dev_->StreamCreate(&s, flags, 0), cudaSuccess);
    return s;
  }
  // Pinned host memory of `bytes` bytes set to `fill` (a copy between it and the device runs on a copy engine at
  // the link's rate and does not hold the host); the device frees it.
  struct Pinned {
    char* p;
    size_t n;
    char* data() const { return p; }
    size_t size() const { return n; }
  };
  Pinned PinnedHost(size_t bytes, char fill = 0) {
    void* p = nullptr;
    EXPECT_EQ(dev_->MallocHost(&p, bytes), cudaSuccess);
    std::memset(p, fill, bytes);
    return {static_cast<char*>(p), bytes};
  }
  // The virtual time at which everything enqueued on `s` so far completes.
  double Mark(cudaStream_t s) {
    cudaEvent_t e = nullptr;
    EXPECT_EQ(dev_->EventCreate(&e, 0), cudaSuccess);
    EXPECT_EQ(dev_->EventRecord(e, s), cudaSuccess);
    const double t = e->time;
    dev_->EventDestroy(e);
    return t;
  }

  std::unique_ptr<Device> dev_;
  const CUfunc_st* busy_ = nullptr;
  const CUfunc_st* touch_ = nullptr;
  const CUfunc_st* sum_ = nullptr;
  const CUfunc_st* plain_ = nullptr;
};

}  // namespace simcuda::testing
