// Tests of CUDA's virtual memory management on the device model: capacity, data through mappings, the link rate
// of host-backed mappings, and the lost context of a touch where nothing is mapped or accessible.
#include <cuda.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "device/device.h"
#include "tests/device_fixture.h"

namespace simcuda {
namespace {

using namespace simcuda::testing;  // NOLINT: the fixture's names

constexpr uint64_t kChunk = kVmmGranularity;  // 2 MiB

class VmmTest : public DeviceTest {
 protected:
  void SetUp() override {
    Config c = TestConfig(64 * kMiB);
    // Host chunks' calls cost twice the device chunks'.
    c.profile.host.device_chunks = {.create_s = 1e-6, .map_s = 3e-6, .set_access_s = 5e-6, .set_access_more_s = 1e-6,
                                    .unmap_s = 7e-6, .release_s = 1e-6};
    c.profile.host.host_chunks = {.create_s = 2e-6, .map_s = 6e-6, .set_access_s = 10e-6, .set_access_more_s = 2e-6,
                                  .unmap_s = 14e-6, .release_s = 2e-6};
    Init(c);
  }
  // A reserved range of `chunks` chunks with one chunk (on the device or the host) mapped, accessible, at its
  // start; its handle in `handle`.
  uintptr_t Mapped(bool on_host, uint64_t chunks = 1, uint64_t* handle = nullptr) {
    uintptr_t base = 0;
    uint64_t h = 0;
    EXPECT_EQ(dev_->AddressReserve(&base, chunks * kChunk, 0), cudaSuccess);
    const int where = on_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    EXPECT_EQ(dev_->MemCreate(&h, kChunk, on_host, where, 0), cudaSuccess);
    EXPECT_EQ(dev_->MemMap(base, kChunk, 0, h), cudaSuccess);
    EXPECT_EQ(dev_->MemSetAccess(base, kChunk, Access::kReadWrite), cudaSuccess);
    if (handle != nullptr) *handle = h;
    return base;
  }
  cudaError_t Plain(uintptr_t p, cudaStream_t s = nullptr) {
    void* args[] = {&p};
    return dev_->Launch(plain_, {dim3(1), dim3(1), 0}, args, s);
  }
  size_t Free() {
    size_t free_bytes = 0, total = 0;
    EXPECT_EQ(dev_->MemGetInfo(&free_bytes, &total), cudaSuccess);
    return free_bytes;
  }
};

// Device chunks take device memory from their creation until they are gone; host chunks take none. Releasing a
// mapped handle is legal: the memory goes with its last mapping.
TEST_F(VmmTest, DeviceChunksTakeDeviceMemoryHostChunksDoNot) {
  EXPECT_EQ(Free(), 64 * kMiB);
  uint64_t h = 0;
  const uintptr_t d = Mapped(false, 1, &h);
  EXPECT_EQ(Free(), 64 * kMiB - kChunk);
  Mapped(true);
  EXPECT_EQ(Free(), 64 * kMiB - kChunk);
  uint64_t unmapped = 0;
  ASSERT_EQ(dev_->MemCreate(&unmapped, 4 * kChunk, false, CU_MEM_LOCATION_TYPE_DEVICE, 0), cudaSuccess);
  EXPECT_EQ(Free(), 64 * kMiB - 5 * kChunk);
  ASSERT_EQ(dev_->MemRelease(unmapped), cudaSuccess);
  EXPECT_EQ(Free(), 64 * kMiB - kChunk);
  ASSERT_EQ(dev_->MemRelease(h), cudaSuccess);  // still mapped: still there
  EXPECT_EQ(Free(), 64 * kMiB - kChunk);
  EXPECT_EQ(dev_->MemRelease(h), cudaErrorInvalidValue);
  ASSERT_EQ(dev_->MemUnmap(d, kChunk), cudaSuccess);
  EXPECT_EQ(Free(), 64 * kMiB);
  // Beyond the capacity, as cudaMalloc.
  EXPECT_EQ(dev_->MemCreate(&h, 64 * kMiB + kChunk, false, CU_MEM_LOCATION_TYPE_DEVICE, 0), cudaErrorMemoryAllocation);
  EXPECT_EQ(dev_->GetStats().peak_device_bytes, 5 * kChunk);
}

// A chunk's bytes are the same through each of its mappings, and stay with the chunk when it moves to another
// address: what keeps a pointer stable while its backing changes, the other way round.
TEST_F(VmmTest, AChunksBytesAreTheSameThroughEveryMapping) {
  uint64_t h = 0;
  const uintptr_t a = Mapped(false, 1, &h);
  const Pinned host = PinnedHost(kChunk, 9);
  ASSERT_EQ(dev_->Memcpy(reinterpret_cast<void*>(a), host.data(), kChunk, cudaMemcpyHostToDevice, nullptr, true),
            cudaSuccess);
  uintptr_t b = 0;
  ASSERT_EQ(dev_->AddressReserve(&b, kChunk, 0), cudaSuccess);
  ASSERT_EQ(dev_->MemMap(b, kChunk, 0, h), cudaSuccess);
  ASSERT_EQ(dev_->MemSetAccess(b, kChunk, Access::kReadWrite), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<const char*>(b)[kChunk - 1], 9);
  reinterpret_cast<char*>(b)[0] = 4;
  EXPECT_EQ(reinterpret_cast<const char*>(a)[0], 4);
  ASSERT_EQ(dev_->MemUnmap(a, kChunk), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<const char*>(b)[1], 9);
  EXPECT_EQ(Free(), 64 * kMiB - kChunk);  // one chunk, mapped twice, counted once
  cudaPointerAttributes attr;
  ASSERT_EQ(dev_->PointerAttributes(&attr, reinterpret_cast<void*>(b + 5)), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
}

// A kernel reads and writes a host-backed mapping over the host link (the copy engines' rate), a device-backed one
// at the device's memory bandwidth. Map, set-access and unmap cost the host their time.
TEST_F(VmmTest, AHostBackedMappingIsReadAtTheLinkRate) {
  const uintptr_t on_host = Mapped(true);
  const uintptr_t on_device = Mapped(false);
  EXPECT_NEAR(dev_->HostTime(), (2e-6 + 6e-6 + 10e-6) + (1e-6 + 3e-6 + 5e-6), kEps);  // create, map, access
  const double t0 = dev_->HostTime();
  cudaStream_t s = Stream();
  ASSERT_EQ(Plain(on_host, s), cudaSuccess);  // the whole mapping: 2 MiB at 1e9 B/s
  EXPECT_NEAR(Mark(s), t0 + static_cast<double>(kChunk) / 1e9, kEps);
  const double t1 = Mark(s);
  ASSERT_EQ(Plain(on_device, s), cudaSuccess);  // at 1e11 B/s
  EXPECT_NEAR(Mark(s), t1 + static_cast<double>(kChunk) / 1e11, kEps);
  // A copy from the host-backed mapping to device memory is a pinned copy on the host-to-device engine.
  void* d = nullptr;
  ASSERT_EQ(dev_->Malloc(&d, kChunk), cudaSuccess);
  const double t2 = Mark(s);
  ASSERT_EQ(dev_->Memcpy(d, reinterpret_cast<void*>(on_host), kChunk, cudaMemcpyDefault, s, false), cudaSuccess);
  EXPECT_NEAR(Mark(s), t2 + static_cast<double>(kChunk) / 1e9, kEps);
  EXPECT_EQ(dev_->GetStats().h2d_bytes, kChunk);
  ASSERT_EQ(dev_->Synchronize(), cudaSuccess);
  const double t3 = dev_->HostTime();
  ASSERT_EQ(dev_->MemUnmap(on_host, kChunk), cudaSuccess);
  EXPECT_NEAR(dev_->HostTime(), t3 + 14e-6, kEps);
}

// The driver runs virtual memory calls one at a time (an H200, run 10): a thread's call that starts while another
// thread's runs starts when that one ends. Setting access costs per 2 MiB beyond the first.
TEST_F(VmmTest, VirtualMemoryCallsRunOneAtATime) {
  uintptr_t base = 0;
  uint64_t a = 0, b = 0;
  ASSERT_EQ(dev_->AddressReserve(&base, 4 * kChunk, 0), cudaSuccess);
  ASSERT_EQ(dev_->MemCreate(&a, kChunk, false, CU_MEM_LOCATION_TYPE_DEVICE, 0), cudaSuccess);
  ASSERT_EQ(dev_->MemCreate(&b, kChunk, false, CU_MEM_LOCATION_TYPE_DEVICE, 0), cudaSuccess);
  const double t0 = dev_->HostTime();
  std::atomic<bool> mapped{false};
  double other = 0;
  std::thread second([&] {  // its clock starts at t0
    while (!mapped.load()) std::this_thread::yield();
    ASSERT_EQ(dev_->MemMap(base + kChunk, kChunk, 0, b), cudaSuccess);
    other = dev_->HostTime();
  });
  ASSERT_EQ(dev_->MemMap(base, kChunk, 0, a), cudaSuccess);
  EXPECT_NEAR(dev_->HostTime(), t0 + 3e-6, kEps);
  mapped = true;
  second.join();
  EXPECT_NEAR(other, t0 + 2 * 3e-6, kEps);
  const double t1 = std::max(dev_->HostTime(), other);
  ASSERT_EQ(dev_->MemSetAccess(base, 2 * kChunk, Access::kReadWrite), cudaSuccess);
  EXPECT_NEAR(dev_->HostTime(), t1 + 5e-6 + 1e-6, kEps);
  // Counted: two creates, two maps, one set access.
  const Stats s = dev_->GetStats();
  EXPECT_EQ(s.vmm_calls, 5u);
  EXPECT_NEAR(s.vmm_busy_s, 2 * 1e-6 + 2 * 3e-6 + 5e-6 + 1e-6, kEps);
}

// A kernel that touches a reserved address without a mapping loses the context: that launch and every later call
// fail with cudaErrorIllegalAddress.
TEST_F(VmmTest, AKernelOnAnUnmappedAddressLosesTheContext) {
  const uintptr_t base = Mapped(false, 2);  // the second chunk's range is reserved, not mapped
  ASSERT_EQ(Plain(base), cudaSuccess);
  EXPECT_EQ(Plain(base + kChunk), cudaErrorIllegalAddress);
  void* p = nullptr;
  EXPECT_EQ(dev_->Malloc(&p, 1024), cudaErrorIllegalAddress);
  EXPECT_EQ(Plain(base), cudaErrorIllegalAddress);
  EXPECT_EQ(dev_->Synchronize(), cudaErrorIllegalAddress);
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(dev_->MemGetInfo(&free_bytes, &total), cudaErrorIllegalAddress);
}

// A copy into a reserved range without a mapping, or into a mapping the device has no access to, is refused at the
// call (cudaErrorInvalidValue, as a copy of KARMA's copy path into a range not yet mapped was on an H200); the
// context stays usable.
TEST_F(VmmTest, ACopyIntoARangeWithoutAMappingOrAccessIsRefused) {
  uintptr_t base = 0;
  uint64_t h = 0;
  ASSERT_EQ(dev_->AddressReserve(&base, 2 * kChunk, 0), cudaSuccess);
  ASSERT_EQ(dev_->MemCreate(&h, kChunk, false, CU_MEM_LOCATION_TYPE_DEVICE, 0), cudaSuccess);
  ASSERT_EQ(dev_->MemMap(base, kChunk, 0, h), cudaSuccess);  // mapped, no access yet; the second chunk unmapped
  Access a = Access::kReadWrite;
  ASSERT_EQ(dev_->MemGetAccess(base, &a), cudaSuccess);
  EXPECT_EQ(a, Access::kNone);
  const Pinned host = PinnedHost(4096);
  for (uintptr_t at : {base, base + kChunk}) {
    EXPECT_EQ(dev_->Memcpy(reinterpret_cast<void*>(at), host.data(), 4096, cudaMemcpyHostToDevice, nullptr, false),
              cudaErrorInvalidValue);
    EXPECT_EQ(dev_->Memset(reinterpret_cast<void*>(at), 0, 4096, nullptr, false), cudaErrorInvalidValue);
  }
  ASSERT_EQ(dev_->MemSetAccess(base, kChunk, Access::kReadWrite), cudaSuccess);
  EXPECT_EQ(dev_->Memcpy(reinterpret_cast<void*>(base), host.data(), 4096, cudaMemcpyHostToDevice, nullptr, false),
            cudaSuccess);
  EXPECT_EQ(dev_->Synchronize(), cudaSuccess);
}

TEST_F(VmmTest, ADeclaredRangePastAMappingLosesTheContext) {
  const uintptr_t base = Mapped(false, 2);
  EXPECT_EQ(Touch(reinterpret_cast<void*>(base), kChunk), cudaSuccess);
  EXPECT_EQ(Touch(reinterpret_cast<void*>(base), kChunk + 1), cudaErrorIllegalAddress);
}

// Unmapping is not stream-ordered: a range unmapped while work on it still runs loses the context, as the work
// would fault on a GPU; after a synchronization it is fine.
TEST_F(VmmTest, UnmappingARangeWorkStillUsesLosesTheContext) {
  const uintptr_t done = Mapped(false);
  const uintptr_t busy = Mapped(false);
  cudaStream_t s = Stream();
  ASSERT_EQ(Plain(done, s), cudaSuccess);
  ASSERT_EQ(dev_->StreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(dev_->MemUnmap(done, kChunk), cudaSuccess);
  ASSERT_EQ(Busy(1e-3, s), cudaSuccess);
  ASSERT_EQ(Plain(busy, s), cudaSuccess);  // runs after the 1 ms kernel
  EXPECT_EQ(dev_->MemUnmap(busy, kChunk), cudaSuccess);  // the call itself succeeds, as on a GPU
  EXPECT_EQ(dev_->Synchronize(), cudaErrorIllegalAddress);
}

// The calls check their arguments as the driver documents (the error codes through libcuda: api_test).
TEST_F(VmmTest, WrongCallsAreRefused) {
  uintptr_t base = 0;
  EXPECT_EQ(dev_->AddressReserve(&base, kChunk + 4096, 0), cudaErrorInvalidValue);  // off the granularity
  EXPECT_EQ(dev_->AddressReserve(&base, kChunk, 3 * kChunk), cudaErrorInvalidValue);  // alignment not a power of 2
  ASSERT_EQ(dev_->AddressReserve(&base, 4 * kChunk, 0), cudaSuccess);
  uint64_t h = 0, big = 0;
  EXPECT_EQ(dev_->MemCreate(&h, kChunk / 2, false, CU_MEM_LOCATION_TYPE_DEVICE, 0), cudaErrorInvalidValue);
  ASSERT_EQ(dev_->MemCreate(&h, kChunk, false, CU_MEM_LOCATION_TYPE_DEVICE, 0), cudaSuccess);
  ASSERT_EQ(dev_->MemCreate(&big, 2 * kChunk, false, CU_MEM_LOCATION_TYPE_DEVICE, 0), cudaSuccess);
  EXPECT_EQ(dev_->MemMap(base + 4096, kChunk, 0, h), cudaErrorInvalidValue);          // address off the granularity
  EXPECT_EQ(dev_->MemMap(base, 2 * kChunk, 0, h), cudaErrorInvalidValue);            // more than the chunk
  EXPECT_EQ(dev_->MemMap(base, kChunk, kChunk, big), cudaErrorInvalidValue);          // the offset must be 0
  EXPECT_EQ(dev_->MemMap(base + 3 * kChunk, 2 * kChunk, 0, big), cudaErrorInvalidValue);  // past the reservation
  EXPECT_EQ(dev_->MemMap(base, kChunk, 0, 12345), cudaErrorInvalidValue);             // no such handle
  ASSERT_EQ(dev_->MemMap(base + kChunk, 2 * kChunk, 0, big), cudaSuccess);
  EXPECT_EQ(dev_->MemMap(base + 2 * kChunk, kChunk, 0, h), cudaErrorInvalidValue);    // over a mapping
  EXPECT_EQ(dev_->MemMap(base, 2 * kChunk, 0, big), cudaErrorInvalidValue);           // into a mapping
  EXPECT_EQ(dev_->MemUnmap(base + kChunk, kChunk), cudaErrorInvalidValue);            // part of a mapping
  EXPECT_EQ(dev_->MemUnmap(base + 2 * kChunk, kChunk), cudaErrorInvalidValue);
  EXPECT_EQ(dev_->MemUnmap(base, kChunk), cudaErrorInvalidValue);                     // nothing mapped there
  EXPECT_EQ(dev_->MemSetAccess(base, kChunk, Access::kReadWrite), cudaErrorInvalidValue);  // no mapping
  EXPECT_EQ(dev_->MemSetAccess(base, 3 * kChunk, Access::kReadWrite), cudaErrorInvalidValue);  // partly mapped
  EXPECT_EQ(dev_->MemSetAccess(base + kChunk, kChunk, Access::kReadWrite), cudaErrorInvalidValue);  // part of one
  Access a;
  EXPECT_EQ(dev_->MemGetAccess(base, &a), cudaErrorInvalidValue);
  uint64_t retained = 0;
  EXPECT_EQ(dev_->MemRetain(&retained, base), cudaErrorInvalidValue);
  ASSERT_EQ(dev_->MemRetain(&retained, base + kChunk + 100), cudaSuccess);
  EXPECT_EQ(retained, big);
  ASSERT_EQ(dev_->MemRelease(retained), cudaSuccess);
  EXPECT_EQ(dev_->AddressFree(base, 2 * kChunk), cudaErrorInvalidValue);  // not the reserved size
  EXPECT_EQ(dev_->AddressFree(base, 4 * kChunk), cudaErrorInvalidValue);  // still holds a mapping
  ASSERT_EQ(dev_->MemUnmap(base + kChunk, 2 * kChunk), cudaSuccess);
  ASSERT_EQ(dev_->AddressFree(base, 4 * kChunk), cudaSuccess);
  // Nothing above lost the context.
  EXPECT_EQ(dev_->Synchronize(), cudaSuccess);
}

}  // namespace
}  // namespace simcuda
