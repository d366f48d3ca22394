// Tests of the host's side of the clock: what calls cost the calling thread, managed-memory calls that hold it for
// their transfer, the copy engines with pinned memory against pageable copies, and streams that wait on values.
#include <cuda.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "device/device.h"
#include "tests/device_fixture.h"

namespace simcuda {
namespace {

using namespace simcuda::testing;  // NOLINT: the fixture's names

constexpr cudaMemLocation kToDevice{cudaMemLocationTypeDevice, 0};
constexpr cudaMemLocation kToHost{cudaMemLocationTypeHost, 0};

// The round-number profile with managed memory slower than the copy engines, as on an H100: 2 ms per MB to the
// device, 4 ms per MB to the host (the copy engines: 1 ms per MB each way; pageable copies: 2 ms per MB).
Config SlowManaged(uint64_t capacity) {
  Config c = TestConfig(capacity);
  c.profile.managed = {0.5e9, 0.25e9};
  return c;
}

// A batched eviction of 128 MiB holds its thread for 128 MiB at the managed device-to-host rate; a kernel
// launched after it on an idle stream starts no earlier. A per-range prefetch to the device returns at once.
TEST_F(DeviceTest, ABatchedEvictionHoldsItsThreadForTheTransfer) {
  Init(SlowManaged(256 * kMiB));
  const uint64_t bytes = 128 * kMiB;
  void* m = nullptr;
  ASSERT_EQ(dev_->MallocManaged(&m, bytes), cudaSuccess);
  cudaStream_t s = Stream(), k = Stream();
  ASSERT_EQ(Touch(m, bytes, s), cudaSuccess);  // first touch: populated on the device, nothing moves
  ASSERT_EQ(dev_->Synchronize(), cudaSuccess);
  const double t0 = dev_->HostTime();
  const Range r{reinterpret_cast<uintptr_t>(m), bytes};
  const size_t first = 0;
  ASSERT_EQ(dev_->PrefetchBatch({&r, 1}, {&kToHost, 1}, {&first, 1}, false, s), cudaSuccess);
  const double out = static_cast<double>(bytes) / 0.25e9;  // 0.537 s
  EXPECT_NEAR(dev_->HostTime(), t0 + out, kEps);
  ASSERT_EQ(Busy(1e-3, k), cudaSuccess);
  EXPECT_NEAR(Mark(k), t0 + out + 1e-3, kEps);
  EXPECT_NEAR(dev_->GetStats().managed_calls_blocked_s, out, kEps);
  EXPECT_EQ(dev_->GetStats().prefetched_to_host_bytes, bytes);

  // Back to the device range by range: the call returns before its transfer, which the stream then holds.
  const double t1 = dev_->HostTime();
  ASSERT_EQ(dev_->Prefetch({&r, 1}, kToDevice, s), cudaSuccess);
  EXPECT_NEAR(dev_->HostTime(), t1, kEps);
  EXPECT_NEAR(Mark(s), t1 + static_cast<double>(bytes) / 0.5e9, kEps);
  // An eviction range by range holds the thread as the batch does.
  ASSERT_EQ(dev_->Synchronize(), cudaSuccess);
  const double t2 = dev_->HostTime();
  ASSERT_EQ(dev_->Prefetch({&r, 1}, kToHost, s), cudaSuccess);
  EXPECT_NEAR(dev_->HostTime(), t2 + out, kEps);
}

// 256 MiB each way at once on the two copy engines take 256 MiB at the copy engines' rate, not twice that; the
// calls return at once.
TEST_F(DeviceTest, TheCopyEnginesMovePinnedMemoryBothWaysAtOnce) {
  Init(SlowManaged(512 * kMiB));
  const uint64_t bytes = 256 * kMiB;
  const Pinned host = PinnedHost(bytes, 3);
  void* d = nullptr;
  ASSERT_EQ(dev_->Malloc(&d, bytes), cudaSuccess);
  cudaStream_t up = Stream(), down = Stream();
  ASSERT_EQ(dev_->Memcpy(d, host.data(), bytes, cudaMemcpyHostToDevice, up, false), cudaSuccess);
  ASSERT_EQ(dev_->Memcpy(host.data(), d, bytes, cudaMemcpyDeviceToHost, down, false), cudaSuccess);
  EXPECT_EQ(dev_->HostTime(), 0.0);
  ASSERT_EQ(dev_->Synchronize(), cudaSuccess);
  const double each = static_cast<double>(bytes) / 1e9;
  EXPECT_NEAR(dev_->HostTime(), each, kEps);
  const Stats st = dev_->GetStats();
  EXPECT_NEAR(st.h2d_busy_s, each, kEps);
  EXPECT_NEAR(st.d2h_busy_s, each, kEps);
  EXPECT_EQ(st.pageable_bytes, 0u);
  EXPECT_EQ(static_cast<const char*>(d)[bytes - 1], 3);
}

// A copy from pageable memory goes at the pageable rate and returns only when it is done; from pinned memory at the
// copy engine's, at once.
TEST_F(DeviceTest, APageableCopyIsSlowerAndReturnsWhenDone) {
  std::vector<char> pageable(1000000, 5);
  const Pinned pinned = PinnedHost(1000000, 6);
  void* d = nullptr;
  ASSERT_EQ(dev_->Malloc(&d, 1000000), cudaSuccess);
  cudaStream_t s = Stream();
  ASSERT_EQ(dev_->Memcpy(d, pageable.data(), 1000000, cudaMemcpyHostToDevice, s, false), cudaSuccess);
  EXPECT_NEAR(dev_->HostTime(), 2e-3, kEps);  // 1 MB at 5e8 B/s
  EXPECT_NEAR(Mark(s), 2e-3, kEps);
  ASSERT_EQ(dev_->Memcpy(d, pinned.data(), 1000000, cudaMemcpyHostToDevice, s, false), cudaSuccess);
  EXPECT_NEAR(dev_->HostTime(), 2e-3, kEps);
  EXPECT_NEAR(Mark(s), 3e-3, kEps);
  ASSERT_EQ(dev_->Memcpy(pageable.data(), d, 1000000, cudaMemcpyDeviceToHost, s, false), cudaSuccess);
  EXPECT_NEAR(dev_->HostTime(), 5e-3, kEps);  // after the pinned copy, then 2 ms
  EXPECT_EQ(pageable[999999], 6);
  const Stats st = dev_->GetStats();
  EXPECT_EQ(st.pageable_bytes, 2000000u);
  EXPECT_EQ(st.h2d_bytes, 2000000u);
}

// cudaHostRegister makes a pageable range pinned: the copy engines' rate, and the call returns at once.
TEST_F(DeviceTest, RegisteredHostMemoryIsPinned) {
  std::vector<char> buffer(1000000, 1);
  void* d = nullptr;
  ASSERT_EQ(dev_->Malloc(&d, 1000000), cudaSuccess);
  ASSERT_EQ(dev_->HostRegister(buffer.data(), buffer.size()), cudaSuccess);
  EXPECT_EQ(dev_->HostRegister(buffer.data() + 10, 10), cudaErrorHostMemoryAlreadyRegistered);
  cudaStream_t s = Stream();
  ASSERT_EQ(dev_->Memcpy(d, buffer.data(), buffer.size(), cudaMemcpyHostToDevice, s, false), cudaSuccess);
  EXPECT_EQ(dev_->HostTime(), 0.0);
  EXPECT_NEAR(Mark(s), 1e-3, kEps);
  cudaPointerAttributes attr;
  ASSERT_EQ(dev_->PointerAttributes(&attr, buffer.data() + 5), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  EXPECT_EQ(dev_->FreeHost(buffer.data()), cudaErrorInvalidValue);  // registered, not allocated
  ASSERT_EQ(dev_->HostUnregister(buffer.data()), cudaSuccess);
  EXPECT_EQ(dev_->HostUnregister(buffer.data()), cudaErrorHostMemoryNotRegistered);
  ASSERT_EQ(dev_->Memcpy(d, buffer.data(), buffer.size(), cudaMemcpyHostToDevice, s, false), cudaSuccess);
  EXPECT_NEAR(dev_->HostTime(), 1e-3 + 2e-3, kEps);  // pageable again: after the first copy, 2 ms
}

// Each launch costs the host its launch time, and work is ready no earlier than the host enqueued it: kernels
// shorter than a launch leave the device idle between them.
TEST_F(DeviceTest, LaunchesCostHostTimeAndShortKernelsWaitForTheHost) {
  Config c = TestConfig();
  c.profile.host.launch_s = 10e-6;
  c.profile.host.call_s = 1e-6;
  c.profile.host.order_call_s = 0.5e-6;
  Init(c);
  cudaStream_t s = nullptr;
  ASSERT_EQ(dev_->StreamCreate(&s, cudaStreamNonBlocking, 0), cudaSuccess);  // 1 us
  for (int i = 0; i < 10; ++i) ASSERT_EQ(Busy(1e-6, s), cudaSuccess);
  EXPECT_NEAR(dev_->HostTime(), 1e-6 + 10 * 10e-6, kEps);
  // The stream was done before the host recorded the event (one call to create it): the device idled 9 us of 10.
  EXPECT_NEAR(Mark(s), 1e-6 + 10 * 10e-6 + 1e-6, kEps);
  EXPECT_NEAR(dev_->GetStats().compute_busy_s, 10 * 1e-6, kEps);
  // Longer kernels keep the device busy, and the host runs ahead of them.
  const double h = dev_->HostTime();
  ASSERT_EQ(Busy(1e-3, s), cudaSuccess);
  ASSERT_EQ(Busy(1e-3, s), cudaSuccess);
  EXPECT_NEAR(Mark(s), h + 2e-3, kEps);
  EXPECT_NEAR(dev_->HostTime(), h + 2 * 10e-6 + 1e-6 + 0.5e-6, kEps);  // two launches, Mark's event create, record
}

// Each thread has its own clock: one held by a batched eviction does not hold another's launches.
TEST_F(DeviceTest, AThreadHeldByAManagedCallHoldsNoOtherThread) {
  Init(SlowManaged(64 * kMiB));
  void* m = nullptr;
  ASSERT_EQ(dev_->MallocManaged(&m, 4 * kMiB), cudaSuccess);
  ASSERT_EQ(Touch(m, 4 * kMiB), cudaSuccess);
  ASSERT_EQ(dev_->Synchronize(), cudaSuccess);
  const double t0 = dev_->HostTime();
  double held_until = 0;
  std::thread mover([&] {
    cudaStream_t s = nullptr;
    ASSERT_EQ(dev_->StreamCreate(&s, cudaStreamNonBlocking, 0), cudaSuccess);
    const Range r{reinterpret_cast<uintptr_t>(m), 4 * kMiB};
    const size_t first = 0;
    ASSERT_EQ(dev_->PrefetchBatch({&r, 1}, {&kToHost, 1}, {&first, 1}, false, s), cudaSuccess);
    held_until = dev_->HostTime();
  });
  mover.join();
  EXPECT_NEAR(held_until, t0 + 4.0 * kMiB / 0.25e9, kEps);
  EXPECT_NEAR(dev_->HostTime(), t0, kEps);  // this thread was not held
  cudaStream_t k = Stream();
  ASSERT_EQ(Busy(1e-3, k), cudaSuccess);
  EXPECT_NEAR(Mark(k), t0 + 1e-3, kEps);  // nor is its work: the compute engine is free meanwhile
}

// A stream that waits on a value (in device memory) goes on when it holds: at the time of the stream write that made
// it so, which a stream of another host thread makes at that thread's clock.
TEST_F(DeviceTest, AStreamWaitsOnAValueAnotherThreadsStreamWrites) {
  void* flags = nullptr;
  ASSERT_EQ(dev_->Malloc(&flags, 64), cudaSuccess);
  ASSERT_EQ(dev_->Memset(flags, 0, 64, nullptr, true), cudaSuccess);
  const double t0 = dev_->HostTime();
  const auto flag = reinterpret_cast<uintptr_t>(flags);
  cudaStream_t s = Stream();
  ASSERT_EQ(dev_->WaitValue(s, flag, 1, false, CU_STREAM_WAIT_VALUE_EQ), cudaSuccess);
  EXPECT_EQ(dev_->StreamQuery(s), cudaErrorNotReady);
  std::thread writer([&] {
    // This thread's clock starts at the other's (2 us: its poll) and gains 1 ms (a blocking copy of 1 MB) before
    // its stream writes the value.
    const Pinned src = PinnedHost(1000000);
    void* d = nullptr;
    ASSERT_EQ(dev_->Malloc(&d, 1000000), cudaSuccess);
    ASSERT_EQ(dev_->Memcpy(d, src.data(), 1000000, cudaMemcpyHostToDevice, nullptr, true), cudaSuccess);
    cudaStream_t w = nullptr;
    ASSERT_EQ(dev_->StreamCreate(&w, cudaStreamNonBlocking, 0), cudaSuccess);
    ASSERT_EQ(dev_->WriteValue(w, flag, 1, false), cudaSuccess);
  });
  ASSERT_EQ(Busy(1e-3, s), cudaSuccess);  // enqueued behind the wait: returns once the value holds
  writer.join();
  EXPECT_NEAR(Mark(s), t0 + Device::kPollSeconds + 1e-3 + 1e-3, 2e-5);

  // A value written by another stream of this thread: at that write's virtual time.
  const uintptr_t flag2 = flag + 4;
  cudaStream_t t = Stream(), u = Stream();
  ASSERT_EQ(dev_->WaitValue(u, flag2, 5, false, CU_STREAM_WAIT_VALUE_GEQ), cudaSuccess);
  const double base = Mark(s);
  ASSERT_EQ(Busy(3e-3, t), cudaSuccess);  // after the kernel on s: [2, 5] ms
  ASSERT_EQ(dev_->WriteValue(t, flag2, 7, false), cudaSuccess);
  ASSERT_EQ(Busy(1e-3, u), cudaSuccess);
  EXPECT_NEAR(Mark(u), base + 3e-3 + 1e-3, kEps);
  // Already true when enqueued: no wait beyond the write's time.
  ASSERT_EQ(dev_->WaitValue(t, flag2, 7, false, CU_STREAM_WAIT_VALUE_EQ), cudaSuccess);
  EXPECT_EQ(dev_->StreamQuery(t), cudaErrorNotReady);  // its kernel still runs
  // Pageable and pinned host memory are refused (pinned as an H200's driver did).
  uint32_t pageable = 0;
  EXPECT_EQ(dev_->WaitValue(t, reinterpret_cast<uintptr_t>(&pageable), 0, false, CU_STREAM_WAIT_VALUE_EQ),
            cudaErrorInvalidValue);
  const Pinned pinned = PinnedHost(64);
  EXPECT_EQ(dev_->WaitValue(t, reinterpret_cast<uintptr_t>(pinned.data()), 0, false, CU_STREAM_WAIT_VALUE_EQ),
            cudaErrorInvalidValue);
  EXPECT_EQ(dev_->WriteValue(t, reinterpret_cast<uintptr_t>(pinned.data()), 1, false), cudaErrorInvalidValue);
}

// A stream destroyed while a thread waits to enqueue behind its value wait: the thread goes on, and the call fails
// as one on a destroyed stream does.
TEST_F(DeviceTest, AStreamDestroyedWhileAThreadWaitsOnItsValue) {
  void* flags = nullptr;
  ASSERT_EQ(dev_->Malloc(&flags, 64), cudaSuccess);
  ASSERT_EQ(dev_->Memset(flags, 0, 64, nullptr, true), cudaSuccess);
  cudaStream_t s = Stream();
  ASSERT_EQ(dev_->WaitValue(s, reinterpret_cast<uintptr_t>(flags), 1, false, CU_STREAM_WAIT_VALUE_EQ), cudaSuccess);
  std::thread destroyer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(dev_->StreamDestroy(s), cudaSuccess);
  });
  EXPECT_EQ(Busy(1e-3, s), cudaErrorInvalidResourceHandle);
  destroyer.join();
  cudaStream_t k = Stream();
  EXPECT_EQ(Busy(1e-3, k), cudaSuccess);  // nothing waits any more
}

// A call from a thread whose thread-locals are being destroyed still works: the main thread's are destroyed before
// exit()'s handlers run, where an interposed runtime's shutdown synchronizes events (found by ASan in e2e_drift).
struct CallAtThreadExit {
  Device* dev = nullptr;
  double seen = -1;
  ~CallAtThreadExit() {
    if (dev != nullptr) seen = dev->HostTime();
  }
};

TEST_F(DeviceTest, ACallAfterTheThreadsLocalsAreDestroyedWorks) {
  std::thread t([&] {
    thread_local CallAtThreadExit late;  // constructed before the device's thread-locals: destroyed after them
    late.dev = dev_.get();
    EXPECT_GE(dev_->HostTime(), 0.0);
  });
  t.join();
  EXPECT_GE(dev_->HostTime(), 0.0);
}

}  // namespace
}  // namespace simcuda
