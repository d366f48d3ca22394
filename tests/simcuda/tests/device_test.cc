// Unit tests of the device model: capacity, virtual time of streams and events, overlap, paging, discard, threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "device/device.h"
#include "tests/device_fixture.h"

namespace simcuda {
namespace {

using namespace simcuda::testing;  // NOLINT: the fixture's names

// ---- capacity -------------------------------------------------------------------------------------------

TEST_F(DeviceTest, NonManagedAllocationsFailBeyondCapacity) {
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  ASSERT_EQ(dev_->Malloc(&a, 40 * kMiB), cudaSuccess);
  EXPECT_EQ(dev_->Malloc(&b, 30 * kMiB), cudaErrorMemoryAllocation);
  EXPECT_EQ(b, nullptr);
  ASSERT_EQ(dev_->Malloc(&b, 24 * kMiB), cudaSuccess);  // exactly full
  EXPECT_EQ(dev_->MallocAsync(&c, 512, nullptr), cudaErrorMemoryAllocation);
  size_t free_bytes = 1, total = 0;
  dev_->MemGetInfo(&free_bytes, &total);
  EXPECT_EQ(total, 64 * kMiB);
  EXPECT_EQ(free_bytes, 0u);
  ASSERT_EQ(dev_->Free(a), cudaSuccess);
  dev_->MemGetInfo(&free_bytes, &total);
  EXPECT_EQ(free_bytes, 40 * kMiB);
  EXPECT_EQ(dev_->Free(a), cudaErrorInvalidValue);  // double free
  EXPECT_EQ(dev_->GetStats().peak_device_bytes, 64 * kMiB);
}

TEST_F(DeviceTest, ManagedMemoryMayExceedCapacity) {
  void* m = nullptr;
  ASSERT_EQ(dev_->MallocManaged(&m, 256 * kMiB), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m) % kPageBytes, 0u);
  size_t free_bytes = 0, total = 0;
  dev_->MemGetInfo(&free_bytes, &total);
  EXPECT_EQ(free_bytes, total);  // nothing resident yet
  // Touching all of it pages it through the device; no more than the capacity is ever resident.
  ASSERT_EQ(Touch(m, 256 * kMiB), cudaSuccess);
  const Stats s = dev_->GetStats();
  EXPECT_EQ(s.faults, 128u);
  EXPECT_EQ(s.managed_resident_bytes, 64 * kMiB);
  EXPECT_EQ(s.peak_device_bytes, 64 * kMiB);
  EXPECT_EQ(s.evicted_bytes, 192 * kMiB);
}

TEST_F(DeviceTest, MallocEvictsManagedPagesButNeverTheReverse) {
  void* m = nullptr;
  ASSERT_EQ(dev_->MallocManaged(&m, 64 * kMiB), cudaSuccess);
  ASSERT_EQ(Touch(m, 64 * kMiB), cudaSuccess);
  EXPECT_EQ(dev_->GetStats().managed_resident_bytes, 64 * kMiB);
  void* d = nullptr;
  ASSERT_EQ(dev_->Malloc(&d, 10 * kMiB), cudaSuccess);  // 5 pages make room
  Stats s = dev_->GetStats();
  EXPECT_EQ(s.managed_resident_bytes, 54 * kMiB);
  EXPECT_EQ(s.evicted_bytes, 10 * kMiB);
  EXPECT_EQ(s.device_bytes, 64 * kMiB);
  // Touching managed memory again cannot push the cudaMalloc allocation out.
  ASSERT_EQ(Touch(m, 64 * kMiB), cudaSuccess);
  s = dev_->GetStats();
  EXPECT_EQ(s.device_bytes, 64 * kMiB);
  EXPECT_EQ(s.managed_resident_bytes, 54 * kMiB);
}

// The context's memory (SIMCUDA_CONTEXT_MEM) is in use from the start: cudaMemGetInfo shows it, and an
// allocation fits only beside it.
TEST(DeviceContext, ContextMemoryIsInUseFromTheStart) {
  Config c = TestConfig(64 * kMiB);
  c.context_bytes = 8 * kMiB;
  Device dev(c);
  size_t free_bytes = 0, total = 0;
  dev.MemGetInfo(&free_bytes, &total);
  EXPECT_EQ(total, 64 * kMiB);
  EXPECT_EQ(free_bytes, 56 * kMiB);
  void* p = nullptr;
  EXPECT_EQ(dev.Malloc(&p, 60 * kMiB), cudaErrorMemoryAllocation);
  ASSERT_EQ(dev.Malloc(&p, 56 * kMiB), cudaSuccess);
  EXPECT_EQ(dev.GetStats().peak_device_bytes, 64 * kMiB);
}

TEST_F(DeviceTest, MemGetInfoStaysConsistent) {
  std::vector<void*> device, managed;
  for (int round = 0; round < 40; ++round) {
    void* p = nullptr;
    if (round % 3 == 0) {
      if (dev_->Malloc(&p, (round % 7 + 1) * 3 * kMiB + 100) == cudaSuccess) device.push_back(p);
    } else {
      ASSERT_EQ(dev_->MallocManaged(&p, (round % 5 + 1) * 5 * kMiB), cudaSuccess);
      managed.push_back(p);
      ASSERT_EQ(Touch(p, (round % 5 + 1) * 5 * kMiB), cudaSuccess);
    }
    if (round % 4 == 3 && !device.empty()) {
      ASSERT_EQ(dev_->Free(device.front()), cudaSuccess);
      device.erase(device.begin());
    }
    size_t free_bytes = 0, total = 0;
    dev_->MemGetInfo(&free_bytes, &total);
    const Stats s = dev_->GetStats();
    ASSERT_LE(free_bytes, total);
    ASSERT_EQ(free_bytes + s.device_bytes, total) << "round " << round;
    ASSERT_LE(s.device_bytes, s.peak_device_bytes);
  }
}

// ---- virtual time ---------------------------------------------------------------------------------------

TEST_F(DeviceTest, OneStreamRunsInOrder) {
  cudaStream_t s = Stream();
  ASSERT_EQ(Busy(1e-3, s), cudaSuccess);
  EXPECT_NEAR(Mark(s), 1e-3, kEps);
  ASSERT_EQ(Busy(2e-3, s), cudaSuccess);
  EXPECT_NEAR(Mark(s), 3e-3, kEps);
  // The host has not waited for anything yet.
  EXPECT_EQ(dev_->HostTime(), 0.0);
  ASSERT_EQ(dev_->StreamSynchronize(s), cudaSuccess);
  EXPECT_NEAR(dev_->HostTime(), 3e-3, kEps);
  // Work enqueued now cannot start before the host enqueued it.
  ASSERT_EQ(Busy(1e-3, s), cudaSuccess);
  EXPECT_NEAR(Mark(s), 4e-3, kEps);
}

TEST_F(DeviceTest, EventsOrderStreamsAndTimeThem) {
  cudaStream_t a = Stream(), b = Stream();
  cudaEvent_t start = nullptr, after_a = nullptr, end = nullptr;
  ASSERT_EQ(dev_->EventCreate(&start, 0), cudaSuccess);
  ASSERT_EQ(dev_->EventCreate(&after_a, 0), cudaSuccess);
  ASSERT_EQ(dev_->EventCreate(&end, 0), cudaSuccess);
  ASSERT_EQ(dev_->EventRecord(start, a), cudaSuccess);
  ASSERT_EQ(Busy(2e-3, a), cudaSuccess);
  ASSERT_EQ(dev_->EventRecord(after_a, a), cudaSuccess);
  // b copies 1 MB (1 ms on the host-to-device engine) only after a's kernel: [2, 3] ms.
  const Pinned host = PinnedHost(1000000, 7);
  void* d = nullptr;
  ASSERT_EQ(dev_->Malloc(&d, host.size()), cudaSuccess);
  ASSERT_EQ(dev_->StreamWaitEvent(b, after_a), cudaSuccess);
  ASSERT_EQ(dev_->Memcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice, b, false), cudaSuccess);
  ASSERT_EQ(dev_->EventRecord(end, b), cudaSuccess);
  float ms = 0;
  EXPECT_EQ(dev_->EventElapsedTime(&ms, start, end), cudaErrorNotReady);  // the host is still at 0
  EXPECT_EQ(dev_->EventQuery(end), cudaErrorNotReady);
  EXPECT_NEAR(dev_->HostTime(), Device::kPollSeconds, kEps);  // polling costs host time
  ASSERT_EQ(dev_->EventSynchronize(end), cudaSuccess);
  EXPECT_EQ(dev_->EventQuery(end), cudaSuccess);
  ASSERT_EQ(dev_->EventElapsedTime(&ms, start, end), cudaSuccess);
  EXPECT_NEAR(ms, 3.0f, 1e-6);
  ASSERT_EQ(dev_->EventElapsedTime(&ms, after_a, end), cudaSuccess);
  EXPECT_NEAR(ms, 1.0f, 1e-6);
  EXPECT_EQ(static_cast<const char*>(d)[999999], 7);
}

TEST_F(DeviceTest, ElapsedTimeNeedsTimingEventsThatWereRecorded) {
  cudaEvent_t a = nullptr, b = nullptr, untimed = nullptr;
  ASSERT_EQ(dev_->EventCreate(&a, 0), cudaSuccess);
  ASSERT_EQ(dev_->EventCreate(&b, 0), cudaSuccess);
  ASSERT_EQ(dev_->EventCreate(&untimed, cudaEventDisableTiming), cudaSuccess);
  float ms = 0;
  EXPECT_EQ(dev_->EventElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(dev_->EventRecord(a, nullptr), cudaSuccess);
  ASSERT_EQ(dev_->EventRecord(untimed, nullptr), cudaSuccess);
  EXPECT_EQ(dev_->EventElapsedTime(&ms, a, untimed), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(dev_->EventQuery(b), cudaSuccess);  // never recorded: nothing to wait for
  EXPECT_EQ(dev_->EventRecord(reinterpret_cast<cudaEvent_t>(&ms), nullptr), cudaErrorInvalidResourceHandle);
}

TEST_F(DeviceTest, CopiesOverlapComputeOnSeparateEngines) {
  const Pinned host = PinnedHost(2000000, 1);
  void* d1 = nullptr;
  void* d2 = nullptr;
  ASSERT_EQ(dev_->Malloc(&d1, host.size()), cudaSuccess);
  ASSERT_EQ(dev_->Malloc(&d2, host.size()), cudaSuccess);
  cudaStream_t k = Stream(), up = Stream(), down = Stream();
  ASSERT_EQ(Busy(4e-3, k), cudaSuccess);                                                              // [0, 4]
  ASSERT_EQ(dev_->Memcpy(d1, host.data(), host.size(), cudaMemcpyHostToDevice, up, false), cudaSuccess);  // [0, 2]
  ASSERT_EQ(dev_->Memcpy(host.data(), d2, host.size(), cudaMemcpyDeviceToHost, down, false), cudaSuccess);  // [0, 2]
  ASSERT_EQ(dev_->Memcpy(d2, host.data(), host.size(), cudaMemcpyHostToDevice, down, false), cudaSuccess);  // [2, 4]
  EXPECT_NEAR(Mark(up), 2e-3, kEps);
  EXPECT_NEAR(Mark(down), 4e-3, kEps);
  ASSERT_EQ(dev_->Synchronize(), cudaSuccess);
  EXPECT_NEAR(dev_->HostTime(), 4e-3, kEps);
  // The same work on one stream takes the sum.
  cudaStream_t one = Stream();
  ASSERT_EQ(Busy(4e-3, one), cudaSuccess);
  ASSERT_EQ(dev_->Memcpy(d1, host.data(), host.size(), cudaMemcpyHostToDevice, one, false), cudaSuccess);
  ASSERT_EQ(dev_->Memcpy(host.data(), d2, host.size(), cudaMemcpyDeviceToHost, one, false), cudaSuccess);
  EXPECT_NEAR(Mark(one), 4e-3 + 8e-3, kEps);
  const Stats s = dev_->GetStats();
  EXPECT_EQ(s.h2d_bytes, 6000000u);
  EXPECT_EQ(s.d2h_bytes, 4000000u);
}

TEST_F(DeviceTest, ReadyWorkFillsAnIdleGapOfItsEngine) {
  cudaStream_t a = Stream(), b = Stream(), c = Stream();
  cudaEvent_t late = nullptr;
  ASSERT_EQ(dev_->EventCreate(&late, 0), cudaSuccess);
  ASSERT_EQ(Busy(1e-3, a), cudaSuccess);  // compute [0, 1]
  const Pinned host = PinnedHost(5000000);
  void* d = nullptr;
  ASSERT_EQ(dev_->Malloc(&d, host.size()), cudaSuccess);
  ASSERT_EQ(dev_->Memcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice, c, false), cudaSuccess);  // [0, 5]
  ASSERT_EQ(dev_->EventRecord(late, c), cudaSuccess);
  ASSERT_EQ(dev_->StreamWaitEvent(b, late), cudaSuccess);
  ASSERT_EQ(Busy(1e-3, b), cudaSuccess);  // waits for the copy: [5, 6]
  ASSERT_EQ(Busy(2e-3, a), cudaSuccess);  // enqueued later but ready at 1: fills [1, 3]
  EXPECT_NEAR(Mark(b), 6e-3, kEps);
  EXPECT_NEAR(Mark(a), 3e-3, kEps);
  ASSERT_EQ(Busy(3e-3, a), cudaSuccess);  // 3 ms do not fit in [3, 5]: after b's kernel
  EXPECT_NEAR(Mark(a), 9e-3, kEps);
}

TEST_F(DeviceTest, LegacyDefaultStreamSynchronizesWithBlockingStreams) {
  cudaStream_t blocking = Stream(cudaStreamDefault), nonblocking = Stream(cudaStreamNonBlocking);
  const Pinned host = PinnedHost(3000000);
  void* d = nullptr;
  ASSERT_EQ(dev_->Malloc(&d, host.size()), cudaSuccess);
  ASSERT_EQ(dev_->Memcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice, blocking, false), cudaSuccess);  // [0, 3]
  ASSERT_EQ(dev_->Memcpy(host.data(), d, 1000000, cudaMemcpyDeviceToHost, nonblocking, false), cudaSuccess);  // [0, 1]
  ASSERT_EQ(Busy(1e-3, nullptr), cudaSuccess);  // the legacy stream waits for `blocking`: [3, 4]
  EXPECT_NEAR(Mark(nullptr), 4e-3, kEps);
  ASSERT_EQ(Busy(1e-3, blocking), cudaSuccess);  // and `blocking` waits for the legacy stream: [4, 5]
  EXPECT_NEAR(Mark(blocking), 5e-3, kEps);
  ASSERT_EQ(Busy(1e-3, nonblocking), cudaSuccess);  // ready at 1, compute busy [3, 5]: fills [1, 2]
  EXPECT_NEAR(Mark(nonblocking), 2e-3, kEps);
}

// ---- managed memory -------------------------------------------------------------------------------------

TEST_F(DeviceTest, FaultsAreCountedPerBlockAndStallTheKernel) {
  void* m = nullptr;
  const uint64_t bytes = kBlockBytes + 2 * kPageBytes;  // a whole 2 MiB block and two pages of the next
  ASSERT_EQ(dev_->MallocManaged(&m, bytes), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m) % kBlockBytes, 0u);
  cudaStream_t s = Stream();
  // First touch populates on the device: latency only, once per block.
  ASSERT_EQ(Touch(m, bytes, s), cudaSuccess);
  Stats st = dev_->GetStats();
  EXPECT_EQ(st.faults, 2u);
  EXPECT_EQ(st.faulted_bytes, 0u);
  EXPECT_EQ(st.managed_resident_bytes, bytes);
  double t = 2 * 1e-5;
  EXPECT_NEAR(Mark(s), t, kEps);
  // Resident now: a second touch costs nothing.
  ASSERT_EQ(Touch(m, bytes, s), cudaSuccess);
  EXPECT_NEAR(Mark(s), t, kEps);
  // Pushed to the host (on the device-to-host engine), they fault back with their contents.
  const cudaMemLocation host{cudaMemLocationTypeHost, 0};
  const Range all{reinterpret_cast<uintptr_t>(m), bytes};
  ASSERT_EQ(dev_->Prefetch({&all, 1}, host, s), cudaSuccess);
  t += static_cast<double>(bytes) / 1e9;
  EXPECT_NEAR(Mark(s), t, kEps);
  ASSERT_EQ(Touch(static_cast<char*>(m) + kPageBytes, 1, s), cudaSuccess);  // one byte: one page
  t += 1e-5 + kPage / 5e8;
  EXPECT_NEAR(Mark(s), t, 1e-9);
  ASSERT_EQ(Touch(static_cast<char*>(m) + 2 * kPageBytes, 2 * kPageBytes, s), cudaSuccess);  // two, one block
  t += 1e-5 + 2 * kPage / 5e8;
  EXPECT_NEAR(Mark(s), t, 1e-9);
  st = dev_->GetStats();
  EXPECT_EQ(st.faults, 4u);
  EXPECT_EQ(st.faulted_bytes, 3 * kPageBytes);
  EXPECT_EQ(st.prefetched_to_host_bytes, bytes);
  EXPECT_NEAR(st.fault_stall_s, 4 * 1e-5 + 3 * kPage / 5e8, 1e-9);
}

TEST_F(DeviceTest, LeastRecentlyUsedPagesAreEvictedWithWriteBack) {
  Init(TestConfig(3 * kPageBytes));
  char* m = nullptr;
  ASSERT_EQ(dev_->MallocManaged(reinterpret_cast<void**>(&m), 4 * kPageBytes), cudaSuccess);
  cudaStream_t s = Stream();
  for (int p : {0, 1, 2}) ASSERT_EQ(Touch(m + p * kPageBytes, 1, s), cudaSuccess);
  ASSERT_EQ(Touch(m + 0 * kPageBytes, 1, s), cudaSuccess);  // LRU order now 1, 2, 0
  const double before = Mark(s);
  ASSERT_EQ(Touch(m + 3 * kPageBytes, 1, s), cudaSuccess);  // evicts page 1, written back first
  EXPECT_NEAR(Mark(s) - before, 1e-5 + kPage / 1e9, 1e-9);
  Stats st = dev_->GetStats();
  EXPECT_EQ(st.evicted_bytes, kPageBytes);
  EXPECT_EQ(st.faults, 4u);
  // Pages 2, 0 and 3 are resident: no fault. Page 1 faults back, with its contents, evicting page 2.
  for (int p : {2, 0, 3}) ASSERT_EQ(Touch(m + p * kPageBytes, 1, s), cudaSuccess);
  EXPECT_EQ(dev_->GetStats().faults, 4u);
  ASSERT_EQ(Touch(m + 1 * kPageBytes, 1, s), cudaSuccess);
  st = dev_->GetStats();
  EXPECT_EQ(st.faults, 5u);
  EXPECT_EQ(st.faulted_bytes, kPageBytes);
  EXPECT_EQ(st.evicted_bytes, 2 * kPageBytes);
  ASSERT_EQ(Touch(m + 0 * kPageBytes, 1, s), cudaSuccess);
  EXPECT_EQ(dev_->GetStats().faults, 5u);
  ASSERT_EQ(Touch(m + 2 * kPageBytes, 1, s), cudaSuccess);
  EXPECT_EQ(dev_->GetStats().faults, 6u);
  // Write-backs occupy the device-to-host engine.
  EXPECT_NEAR(dev_->GetStats().d2h_busy_s, 3 * kPage / 1e9, 1e-12);
}

TEST_F(DeviceTest, KernelsWithoutACostTouchWholeAllocations) {
  void* m = nullptr;
  ASSERT_EQ(dev_->MallocManaged(&m, 3 * kPageBytes), cudaSuccess);
  void* interior = static_cast<char*>(m) + 100;
  void* args[] = {&interior};
  ASSERT_EQ(dev_->Launch(plain_, {dim3(1), dim3(1), 0}, args, nullptr), cudaSuccess);
  EXPECT_EQ(dev_->GetStats().faults, 1u);  // one block
  EXPECT_EQ(dev_->GetStats().managed_resident_bytes, 3 * kPageBytes);
}

TEST_F(DeviceTest, PrefetchMovesPagesOnTheCopyEngineAndKernelsWaitForThem) {
  void* m = nullptr;
  ASSERT_EQ(dev_->MallocManaged(&m, 8 * kPageBytes), cudaSuccess);
  const Range all{reinterpret_cast<uintptr_t>(m), 8 * kPageBytes};
  cudaStream_t copy = Stream(), work = Stream();
  ASSERT_EQ(Touch(m, 8 * kPageBytes, work), cudaSuccess);  // populate: one fault (one block), [0, 10us]
  const cudaMemLocation host{cudaMemLocationTypeHost, 0}, gpu{cudaMemLocationTypeDevice, 0};
  ASSERT_EQ(dev_->Prefetch({&all, 1}, host, work), cudaSuccess);
  ASSERT_EQ(dev_->Synchronize(), cudaSuccess);
  const double t0 = dev_->HostTime();
  EXPECT_NEAR(t0, 1e-5 + 8 * kPage / 1e9, 1e-9);
  ASSERT_EQ(dev_->Prefetch({&all, 1}, gpu, copy), cudaSuccess);
  EXPECT_NEAR(Mark(copy) - t0, 8 * kPage / 1e9, 1e-9);
  // A kernel on another stream, with no event, finds the pages in flight and waits for them; no faults.
  ASSERT_EQ(Touch(m, kPageBytes, work), cudaSuccess);
  EXPECT_NEAR(Mark(work) - t0, 8 * kPage / 1e9, 1e-9);
  Stats st = dev_->GetStats();
  EXPECT_EQ(st.faults, 1u);
  EXPECT_EQ(st.prefetched_bytes, 8 * kPageBytes);
  EXPECT_EQ(st.prefetched_to_host_bytes, 8 * kPageBytes);
  // Prefetching resident pages again moves nothing; prefetching non-managed memory is an error.
  ASSERT_EQ(dev_->Prefetch({&all, 1}, gpu, copy), cudaSuccess);
  EXPECT_EQ(dev_->GetStats().prefetched_bytes, 8 * kPageBytes);
  void* d = nullptr;
  ASSERT_EQ(dev_->Malloc(&d, kPageBytes), cudaSuccess);
  const Range plain{reinterpret_cast<uintptr_t>(d), kPageBytes};
  EXPECT_EQ(dev_->Prefetch({&plain, 1}, gpu, copy), cudaErrorInvalidValue);
  EXPECT_EQ(dev_->Prefetch({&all, 1}, cudaMemLocation{cudaMemLocationTypeDevice, 1}, copy), cudaErrorInvalidDevice);
}

TEST_F(DeviceTest, PrefetchIntoAFullDeviceEvictsOnTheOtherEngine) {
  Init(TestConfig(4 * kPageBytes));
  char* a = nullptr;
  char* b = nullptr;
  ASSERT_EQ(dev_->MallocManaged(reinterpret_cast<void**>(&a), 4 * kPageBytes), cudaSuccess);
  ASSERT_EQ(dev_->MallocManaged(reinterpret_cast<void**>(&b), 4 * kPageBytes), cudaSuccess);
  const Range rb{reinterpret_cast<uintptr_t>(b), 4 * kPageBytes};
  const cudaMemLocation host{cudaMemLocationTypeHost, 0}, gpu{cudaMemLocationTypeDevice, 0};
  cudaStream_t s = Stream();
  ASSERT_EQ(Touch(b, 4 * kPageBytes, s), cudaSuccess);
  ASSERT_EQ(dev_->Prefetch({&rb, 1}, host, s), cudaSuccess);  // b's 4 pages now hold data on the host
  ASSERT_EQ(Touch(a, 4 * kPageBytes, s), cudaSuccess);        // a fills the device
  ASSERT_EQ(dev_->Synchronize(), cudaSuccess);
  const double t0 = dev_->HostTime();
  ASSERT_EQ(dev_->Prefetch({&rb, 1}, gpu, s), cudaSuccess);
  // 4 pages in and 4 pages out, in both directions at once.
  EXPECT_NEAR(Mark(s) - t0, 4 * kPage / 1e9, 1e-9);
  const Stats st = dev_->GetStats();
  EXPECT_EQ(st.evicted_bytes, 4 * kPageBytes);
  EXPECT_EQ(st.prefetched_bytes, 4 * kPageBytes);
  EXPECT_EQ(st.managed_resident_bytes, 4 * kPageBytes);
}

TEST_F(DeviceTest, DiscardPoisonsContentsAndSkipsWriteBack) {
  Init(TestConfig(2 * kPageBytes));
  float* x = nullptr;
  const size_t n = 2 * kPageBytes / sizeof(float);
  ASSERT_EQ(dev_->MallocManaged(reinterpret_cast<void**>(&x), n * sizeof(float)), cudaSuccess);
  for (size_t i = 0; i < n; ++i) x[i] = 1.0f;
  float* out = nullptr;
  ASSERT_EQ(dev_->MallocHost(reinterpret_cast<void**>(&out), sizeof(float)), cudaSuccess);
  cudaStream_t s = Stream();
  size_t count = n;
  void* args[] = {&x, &count, &out};
  ASSERT_EQ(dev_->Launch(sum_, {dim3(1), dim3(1), 0}, args, s), cudaSuccess);
  EXPECT_EQ(*out, static_cast<float>(n));
  EXPECT_EQ(dev_->GetStats().managed_resident_bytes, 2 * kPageBytes);

  // Discard the second page and 16 bytes of the first: contents read as NaN, the second page leaves the device
  // at no cost, the partly discarded first page stays.
  const Range r{reinterpret_cast<uintptr_t>(x) + kPageBytes - 16, kPageBytes + 16};
  EXPECT_EQ(dev_->DiscardBatch({&r, 1}, nullptr), cudaErrorInvalidValue);  // not on the legacy stream
  ASSERT_EQ(dev_->DiscardBatch({&r, 1}, s), cudaSuccess);
  EXPECT_TRUE(std::isnan(x[kPageBytes / sizeof(float) - 4]));
  EXPECT_FALSE(std::isnan(x[kPageBytes / sizeof(float) - 5]));
  EXPECT_TRUE(std::isnan(x[n - 1]));
  Stats st = dev_->GetStats();
  EXPECT_EQ(st.discarded_bytes, kPageBytes + 16);
  EXPECT_EQ(st.managed_resident_bytes, kPageBytes);
  EXPECT_EQ(st.evicted_bytes, 0u);
  // A recompute that forgot the discarded range shows up as a wrong (NaN) result.
  ASSERT_EQ(dev_->Launch(sum_, {dim3(1), dim3(1), 0}, args, s), cudaSuccess);
  EXPECT_TRUE(std::isnan(*out));
  // Touching the discarded page again faults without moving data (the first sum's fault populated both pages).
  st = dev_->GetStats();
  EXPECT_EQ(st.faults, 2u);
  EXPECT_EQ(st.faulted_bytes, 0u);
  // Rewriting the range makes it valid again.
  for (size_t i = 0; i < n; ++i) x[i] = 2.0f;
  ASSERT_EQ(dev_->Launch(sum_, {dim3(1), dim3(1), 0}, args, s), cudaSuccess);
  EXPECT_EQ(*out, 2.0f * static_cast<float>(n));
}

TEST_F(DeviceTest, DiscardAndPrefetchPopulatesWithoutTransfer) {
  void* m = nullptr;
  ASSERT_EQ(dev_->MallocManaged(&m, 2 * kPageBytes), cudaSuccess);
  const Range all{reinterpret_cast<uintptr_t>(m), 2 * kPageBytes};
  const cudaMemLocation host{cudaMemLocationTypeHost, 0}, gpu{cudaMemLocationTypeDevice, 0};
  cudaStream_t s = Stream();
  ASSERT_EQ(Touch(m, 2 * kPageBytes, s), cudaSuccess);
  ASSERT_EQ(dev_->Prefetch({&all, 1}, host, s), cudaSuccess);
  const size_t start = 0;
  const double before = Mark(s);
  ASSERT_EQ(dev_->PrefetchBatch({&all, 1}, {&gpu, 1}, {&start, 1}, true, s), cudaSuccess);
  EXPECT_NEAR(Mark(s), before, kEps);
  const Stats st = dev_->GetStats();
  EXPECT_EQ(st.prefetched_bytes, 0u);
  EXPECT_EQ(st.managed_resident_bytes, 2 * kPageBytes);
  EXPECT_EQ(st.discarded_bytes, 2 * kPageBytes);
}

TEST_F(DeviceTest, BatchPrefetchChecksItsLocationIndexes) {
  void* m = nullptr;
  ASSERT_EQ(dev_->MallocManaged(&m, 2 * kPageBytes), cudaSuccess);
  const Range r[2] = {{reinterpret_cast<uintptr_t>(m), kPageBytes},
                      {reinterpret_cast<uintptr_t>(m) + kPageBytes, kPageBytes}};
  const cudaMemLocation locs[2] = {{cudaMemLocationTypeDevice, 0}, {cudaMemLocationTypeHost, 0}};
  cudaStream_t s = Stream();
  const size_t good[2] = {0, 1}, bad_first[2] = {1, 1}, bad_order[2] = {0, 0}, past[2] = {0, 2};
  EXPECT_EQ(dev_->PrefetchBatch(r, locs, bad_first, false, s), cudaErrorInvalidValue);
  EXPECT_EQ(dev_->PrefetchBatch(r, locs, bad_order, false, s), cudaErrorInvalidValue);
  EXPECT_EQ(dev_->PrefetchBatch(r, locs, past, false, s), cudaErrorInvalidValue);
  EXPECT_EQ(dev_->PrefetchBatch(r, locs, good, false, cudaStreamLegacy), cudaErrorInvalidValue);
  ASSERT_EQ(dev_->PrefetchBatch(r, locs, good, false, s), cudaSuccess);
  EXPECT_EQ(dev_->GetStats().managed_resident_bytes, kPageBytes);  // the first to the device, the second not
}

// ---- memory queries and copies ----------------------------------------------------------------------------

TEST_F(DeviceTest, PointerAttributesAndCopyChecks) {
  void *d = nullptr, *m = nullptr, *h = nullptr;
  ASSERT_EQ(dev_->Malloc(&d, 1000), cudaSuccess);
  ASSERT_EQ(dev_->MallocManaged(&m, 1000), cudaSuccess);
  ASSERT_EQ(dev_->MallocHost(&h, 1000), cudaSuccess);
  cudaPointerAttributes a;
  ASSERT_EQ(dev_->PointerAttributes(&a, static_cast<char*>(d) + 10), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.hostPointer, nullptr);
  ASSERT_EQ(dev_->PointerAttributes(&a, m), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeManaged);
  ASSERT_EQ(dev_->PointerAttributes(&a, h), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  int stack = 0;
  ASSERT_EQ(dev_->PointerAttributes(&a, &stack), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  // Copies must stay inside their allocations; a freed device range is not host memory.
  EXPECT_EQ(dev_->Memcpy(d, h, 1001, cudaMemcpyDefault, nullptr, true), cudaErrorInvalidValue);
  ASSERT_EQ(dev_->Free(d), cudaSuccess);
  EXPECT_EQ(dev_->Memcpy(d, h, 10, cudaMemcpyDefault, nullptr, true), cudaErrorInvalidValue);
  EXPECT_EQ(dev_->Memcpy(m, h, 10, static_cast<cudaMemcpyKind>(9), nullptr, true), cudaErrorInvalidMemcpyDirection);
  std::memset(h, 5, 1000);
  ASSERT_EQ(dev_->Memset(m, 3, 1000, nullptr, true), cudaSuccess);
  ASSERT_EQ(dev_->Memcpy(h, m, 1000, cudaMemcpyDefault, nullptr, true), cudaSuccess);
  EXPECT_EQ(static_cast<char*>(h)[999], 3);
  EXPECT_EQ(dev_->FreeHost(h), cudaSuccess);
  EXPECT_EQ(dev_->FreeHost(m), cudaErrorInvalidValue);
}

TEST_F(DeviceTest, UnknownHandlesAreErrors) {
  cudaStream_t bogus = reinterpret_cast<cudaStream_t>(0x1234);
  EXPECT_EQ(Busy(1e-3, bogus), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(dev_->StreamSynchronize(bogus), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(dev_->StreamDestroy(nullptr), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(dev_->Launch(nullptr, {dim3(1), dim3(1), 0}, nullptr, nullptr), cudaErrorInvalidDeviceFunction);
  double flops = 1;
  void* args[] = {&flops};
  EXPECT_EQ(dev_->Launch(busy_, {dim3(0), dim3(1), 0}, args, nullptr), cudaErrorInvalidConfiguration);
  EXPECT_EQ(dev_->Launch(busy_, {dim3(1), dim3(2048), 0}, args, nullptr), cudaErrorInvalidConfiguration);
}

TEST_F(DeviceTest, ThePaperPlatformsFiguresDriveTheClock) {
  Init(Config::ForProfile(karma::policy::DefaultProfile()));  // V100: 14 TFLOP/s, 12 GB/s, 4 us per kernel
  const double call = karma::policy::DefaultProfile().host.call_s;
  cudaStream_t s = Stream();  // creating it costs the host one call: the kernel is enqueued then
  ASSERT_EQ(Busy(1e-3, s), cudaSuccess);  // 1e9 flops at 14e12 flop/s, plus the launch overhead
  EXPECT_NEAR(Mark(s), call + 1e9 / 14e12 + 4e-6, kEps);
  void* d = nullptr;
  const Pinned host = PinnedHost(12000000);
  ASSERT_EQ(dev_->Malloc(&d, host.size()), cudaSuccess);
  ASSERT_EQ(dev_->Memcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice, s, true), cudaSuccess);
  EXPECT_NEAR(dev_->HostTime(), call + 1e9 / 14e12 + 4e-6 + 1e-3, kEps);
}

// ---- threads --------------------------------------------------------------------------------------------

TEST_F(DeviceTest, SeveralHostThreadsShareTheDevice) {
  constexpr int kThreads = 4, kRounds = 50;
  std::vector<float> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      cudaStream_t s = nullptr;
      ASSERT_EQ(dev_->StreamCreate(&s, cudaStreamNonBlocking, 0), cudaSuccess);
      float* out = nullptr;
      ASSERT_EQ(dev_->MallocHost(reinterpret_cast<void**>(&out), sizeof(float)), cudaSuccess);
      for (int r = 0; r < kRounds; ++r) {
        float* x = nullptr;
        const size_t n = 1000 + t;
        ASSERT_EQ(r % 2 ? dev_->MallocManaged(reinterpret_cast<void**>(&x), n * 4) : dev_->Malloc(reinterpret_cast<void**>(&x), n * 4),
                  cudaSuccess);
        std::vector<float> host(n, static_cast<float>(t + 1));
        ASSERT_EQ(dev_->Memcpy(x, host.data(), n * 4, cudaMemcpyHostToDevice, s, false), cudaSuccess);
        size_t count = n;
        void* args[] = {&x, &count, &out};
        ASSERT_EQ(dev_->Launch(sum_, {dim3(1), dim3(1), 0}, args, s), cudaSuccess);
        ASSERT_EQ(dev_->StreamSynchronize(s), cudaSuccess);
        results[t] = *out;
        ASSERT_EQ(r % 3 ? dev_->FreeAsync(x, s) : dev_->Free(x), cudaSuccess);
      }
      ASSERT_EQ(dev_->StreamDestroy(s), cudaSuccess);
      ASSERT_EQ(dev_->FreeHost(out), cudaSuccess);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(results[t], static_cast<float>((1000 + t) * (t + 1)));
  const Stats s = dev_->GetStats();
  EXPECT_EQ(s.kernels, static_cast<uint64_t>(kThreads * kRounds));
  EXPECT_EQ(s.memcpys, static_cast<uint64_t>(kThreads * kRounds));
  EXPECT_EQ(s.device_bytes, 0u);
}

}  // namespace
}  // namespace simcuda
