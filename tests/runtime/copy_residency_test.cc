// The copy residency on simcuda's virtual memory API: budgets, bytes kept through evictions and fetches, uses of a
// range while it is away, moves that wait for each other, streams that wait for moves.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "policy/hw_profile.h"
#include "runtime/residency/copy_residency.h"

namespace karma::rt {
namespace {

// simcuda's libraries by soname, as the real ones are found (the test links them; the driver's may not be needed).
void* Resolve(CudaLib lib, const char* name) {
  static void* const cudart = dlopen("libcudart.so.13", RTLD_NOW);
  static void* const driver = dlopen("libcuda.so.1", RTLD_NOW);
  void* handle = lib == CudaLib::kCudart ? cudart : lib == CudaLib::kDriver ? driver : nullptr;
  return handle != nullptr ? dlsym(handle, name) : nullptr;
}

class CopyResidencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_ = LoadCudaApi(&Resolve);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
  std::unique_ptr<CopyResidency> Make(uint64_t granules) {
    auto r = CopyResidency::Create(api_, 0, granules * (2ull << 20));
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  // Fills [addr, addr + bytes) with words derived from `seed`, through a pinned copy.
  static void Fill(uint64_t addr, uint64_t bytes, uint32_t seed) {
    std::vector<uint32_t> words(bytes / 4);
    for (size_t i = 0; i < words.size(); ++i) words[i] = seed * 2654435761u + static_cast<uint32_t>(i);
    ASSERT_EQ(cudaMemcpy(reinterpret_cast<void*>(addr), words.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  static bool Holds(uint64_t addr, uint64_t bytes, uint32_t seed) {
    std::vector<uint32_t> words(bytes / 4);
    if (cudaMemcpy(words.data(), reinterpret_cast<void*>(addr), bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
      return false;
    }
    for (size_t i = 0; i < words.size(); ++i) {
      if (words[i] != seed * 2654435761u + static_cast<uint32_t>(i)) return false;
    }
    return true;
  }
  // Simulated milliseconds from now (an event on a stream of its own) until the move `post` returns is done.
  static float MsUntilDone(Residency& r, const std::function<ResidencyTicket()>& post) {
    cudaStream_t s = nullptr;
    cudaEvent_t posted = nullptr, done = nullptr;
    EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(cudaEventCreate(&posted), cudaSuccess);
    EXPECT_EQ(cudaEventCreate(&done), cudaSuccess);
    EXPECT_EQ(cudaEventRecord(posted, s), cudaSuccess);
    EXPECT_TRUE(r.RecordDone(post(), done).ok());
    EXPECT_EQ(cudaEventSynchronize(done), cudaSuccess);
    float ms = 0;
    EXPECT_EQ(cudaEventElapsedTime(&ms, posted, done), cudaSuccess);
    cudaEventDestroy(posted);
    cudaEventDestroy(done);
    cudaStreamDestroy(s);
    return ms;
  }
  CudaApi api_;
  static constexpr uint64_t kG = 2ull << 20;
};

TEST_F(CopyResidencyTest, AReservationIsOnTheDeviceAsFarAsTheBudgetGoesAndUsableBeyond) {
  auto r = Make(4);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->granularity(), kG);
  auto addr = r->Reserve(6 * kG - 100);  // rounded up to whole granules
  ASSERT_TRUE(addr.ok()) << addr.status().message();
  EXPECT_EQ(r->device_granules(), 4u);
  EXPECT_EQ(r->device_bytes(), 4 * kG);
  Fill(*addr, 6 * kG, 7);
  EXPECT_TRUE(Holds(*addr, 6 * kG, 7));
  EXPECT_EQ(r->peak_device_bytes(), 4 * kG);
}

TEST_F(CopyResidencyTest, EvictedBytesStayUsableAndComeBackWithWhatWasWrittenMeanwhile) {
  auto r = Make(2);
  ASSERT_NE(r, nullptr);
  auto addr = r->Reserve(2 * kG);
  ASSERT_TRUE(addr.ok());
  Fill(*addr, 2 * kG, 1);
  const ResidencyTicket out = r->Evict({*addr, 2 * kG}, {});
  r->Finish();
  EXPECT_TRUE(r->Done(out));
  EXPECT_EQ(r->device_granules(), 0u);
  EXPECT_EQ(r->device_bytes(), 2 * kG) << "the pool keeps its chunks for the next fetch";
  // A use the plan did not foresee, while the bytes are away: the right bytes, through the host chunk.
  EXPECT_TRUE(Holds(*addr, 2 * kG, 1));
  Fill(*addr + kG, kG, 2);
  const ResidencyTicket in = r->Fetch({*addr, 2 * kG}, {});
  r->Finish();
  EXPECT_TRUE(r->Done(in));
  EXPECT_EQ(r->device_granules(), 2u);
  EXPECT_TRUE(Holds(*addr, kG, 1));
  EXPECT_TRUE(Holds(*addr + kG, kG, 2));
  EXPECT_TRUE(r->status().ok()) << r->status().message();
  // Once more, counted: the eviction unmaps both device chunks, maps both host chunks and sets their access in one
  // call; the fetch unmaps the host chunks, maps device chunks and sets their access in one call.
  const uint64_t calls = r->vmm_calls().calls.load();
  r->Evict({*addr, 2 * kG}, {});
  r->Fetch({*addr, 2 * kG}, {});
  r->Finish();
  EXPECT_EQ(r->vmm_calls().calls.load() - calls, 2u * (2 + 2 + 1));
  EXPECT_GT(r->vmm_calls().ns.load(), 0u);
  EXPECT_TRUE(Holds(*addr, kG, 1));
}

// A driver that takes no plain host location for cuMemCreate (some do not): host chunks on the device's host NUMA node;
// one that takes neither: no copy residency.
decltype(CudaApi::cuMemCreate) g_create = nullptr;
bool g_refuse_numa = false;
CUresult CreateRefusingHost(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                            unsigned long long flags) {
  if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST) return CUDA_ERROR_NOT_SUPPORTED;
  if (g_refuse_numa && prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA) return CUDA_ERROR_NOT_SUPPORTED;
  return g_create(handle, size, prop, flags);
}

TEST_F(CopyResidencyTest, HostChunksOnTheHostNumaNodeWhereTheDriverRefusesThePlainHostLocation) {
  CudaApi api = api_;
  g_create = api_.cuMemCreate;
  api.cuMemCreate = &CreateRefusingHost;
  g_refuse_numa = false;
  {
    auto made = CopyResidency::Create(api, 0, kG);
    ASSERT_TRUE(made.ok()) << made.status().message();
    CopyResidency& r = **made;
    auto addr = r.Reserve(2 * kG);  // one granule on the device, one on a host chunk
    ASSERT_TRUE(addr.ok());
    Fill(*addr, 2 * kG, 3);
    r.Evict({*addr, kG}, {});
    r.Finish();
    EXPECT_EQ(r.device_granules(), 0u);
    EXPECT_TRUE(Holds(*addr, 2 * kG, 3));
    r.Fetch({*addr, kG}, {});
    r.Finish();
    EXPECT_EQ(r.device_granules(), 1u);
    EXPECT_TRUE(Holds(*addr, 2 * kG, 3));
    EXPECT_TRUE(r.status().ok()) << r.status().message();
  }
  g_refuse_numa = true;
  auto refused = CopyResidency::Create(api, 0, kG);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("host NUMA node 0"), std::string::npos) << refused.status().message();
}

// A block whose value ends inside its last granule (4.25 MiB on 3 granules): its moves copy the value, not the
// unused rest of the granule, and the value comes back whole.
TEST_F(CopyResidencyTest, AMoveCopiesTheValueNotTheUnusedRestOfItsLastGranule) {
  auto r = Make(3);
  ASSERT_NE(r, nullptr);
  auto addr = r->Reserve(3 * kG);
  ASSERT_TRUE(addr.ok());
  const uint64_t value = 2 * kG + kG / 8;
  const ResidencyRange block{*addr, 3 * kG, value};
  r->Evict(block, {});  // the host chunks made (hundreds of microseconds each), the lanes' threads past their first calls
  r->Fetch(block, {});
  r->Finish();
  Fill(*addr, value, 5);
  const float out_ms = MsUntilDone(*r, [&] { return r->Evict(block, {}); });
  const float in_ms = MsUntilDone(*r, [&] { return r->Fetch(block, {}); });
  r->Finish();
  const policy::HwProfile& p = policy::DefaultProfile();
  // The copy of the value and the remaps of three granules (one call at a time); the whole granules' copy would take
  // 0.9 granules more.
  const policy::VmmCosts& dev = p.host.device_chunks;
  const policy::VmmCosts& host = p.host.host_chunks;
  const double out_remaps_s = 3 * (dev.unmap_s + host.map_s) + host.set_access_s + 2 * host.set_access_more_s;
  const double in_remaps_s = 3 * (host.unmap_s + dev.map_s) + dev.set_access_s + 2 * dev.set_access_more_s;
  EXPECT_LT(out_ms * 1e-3, (value + 0.5 * kG) / p.copy.d2h_bw + out_remaps_s);
  EXPECT_LT(in_ms * 1e-3, (value + 0.5 * kG) / p.copy.h2d_bw + in_remaps_s);
  EXPECT_EQ(r->device_granules(), 3u);
  EXPECT_TRUE(Holds(*addr, value, 5));
  EXPECT_TRUE(r->status().ok()) << r->status().message();
}

// The fetch copies into the chunk only after the eviction's copy and remap, in simulated time too: the lanes' threads
// hand the chunk over through the residency's lock, which a simulated device cannot see, so the chunk carries an
// event of the giving thread's.
TEST_F(CopyResidencyTest, AFetchAtTheBudgetTakesTheChunkAnEvictionGivesBackOnceItIsRemapped) {
  auto r = Make(1);
  ASSERT_NE(r, nullptr);
  auto addr = r->Reserve(2 * kG);  // the first granule on the device, the second on the host
  ASSERT_TRUE(addr.ok());
  Fill(*addr, kG, 3);
  Fill(*addr + kG, kG, 4);
  r->Evict({*addr, kG}, {});  // each lane's threads have clocks of their own by now, behind this thread's
  r->Fetch({*addr, kG}, {});
  r->Finish();
  const float ms = MsUntilDone(*r, [&] {
    r->Evict({*addr, kG}, {});
    return r->Fetch({*addr + kG, kG}, {});
  });
  const policy::HwProfile& p = policy::DefaultProfile();
  const double copy_s = static_cast<double>(kG) / p.copy.d2h_bw;
  const policy::VmmCosts& dev = p.host.device_chunks;
  const double remap_s = dev.unmap_s + dev.map_s + dev.set_access_s;
  EXPECT_GT(ms * 1e-3, 2 * copy_s + remap_s);  // the eviction's copy and remap, then the fetch's copy
  r->Finish();
  EXPECT_EQ(r->device_granules(), 1u);
  EXPECT_EQ(r->stranded(), 0u);
  EXPECT_EQ(r->peak_device_bytes(), kG);
  EXPECT_TRUE(Holds(*addr, kG, 3));
  EXPECT_TRUE(Holds(*addr + kG, kG, 4));
}

TEST_F(CopyResidencyTest, AFetchThatNoEvictionMakesRoomForStaysOnTheHostWithTheRightBytes) {
  auto r = Make(1);
  ASSERT_NE(r, nullptr);
  auto addr = r->Reserve(2 * kG);
  ASSERT_TRUE(addr.ok());
  Fill(*addr + kG, kG, 5);
  r->Fetch({*addr + kG, kG}, {});
  r->Finish();
  EXPECT_EQ(r->stranded(), 1u);
  EXPECT_EQ(r->device_bytes(), kG);
  EXPECT_TRUE(Holds(*addr + kG, kG, 5));
}

// A make at the budget maps the chunk an eviction gives back once the evicted granule is being unmapped (one physical
// chunk at two addresses), and completes only after that unmap: the new value's writes never reach the old value's
// addresses, which lead to its host chunk after.
TEST_F(CopyResidencyTest, AMakeMapsAnEvictedChunkWhileTheEvictedGranuleIsUnmapped) {
  auto r = Make(1);
  ASSERT_NE(r, nullptr);
  auto addr = r->Reserve(2 * kG, /*on_device=*/false);
  ASSERT_TRUE(addr.ok());
  const uint64_t old = *addr, made = *addr + kG;
  r->Make({old, kG}, {});
  r->Finish();
  Fill(old, kG, 8);
  r->Evict({old, kG}, {});  // its host chunk made, and the lanes' threads past their first calls
  r->Fetch({old, kG}, {});
  r->Finish();
  const float ms = MsUntilDone(*r, [&] {
    r->Evict({old, kG}, {});
    return r->Make({made, kG}, {});
  });
  r->Finish();
  const policy::HwProfile& p = policy::DefaultProfile();
  const double copy_s = static_cast<double>(kG) / p.copy.d2h_bw;
  // Not before the copy and the old granule's unmap. No sooner either for taking the chunk early: the driver runs
  // the unmap, the make's map and access change and the host mapper's calls one at a time (an H200, run 10).
  EXPECT_GT(ms * 1e-3, copy_s + p.host.device_chunks.unmap_s);
  Fill(made, kG, 9);
  EXPECT_TRUE(Holds(old, kG, 8));
  EXPECT_TRUE(Holds(made, kG, 9));
  EXPECT_EQ(r->device_granules(), 1u);
  EXPECT_EQ(r->peak_device_bytes(), kG);
  EXPECT_TRUE(r->status().ok()) << r->status().message();
}

TEST_F(CopyResidencyTest, ADroppedGranuleIsRevivedInPlaceOrGivesItsChunkToAFetch) {
  auto r = Make(1);
  ASSERT_NE(r, nullptr);
  auto addr = r->Reserve(2 * kG);  // the first granule on the device, the second on the host
  ASSERT_TRUE(addr.ok());
  Fill(*addr + kG, kG, 6);
  // A drop and a make of a granule with nothing in flight: no job, nothing to wait for, no remap.
  EXPECT_EQ(r->Drop({*addr, kG}, {}, false).seq, 0u);
  EXPECT_FALSE(r->Resident({*addr, kG}));
  EXPECT_EQ(r->Make({*addr, kG}, {}).seq, 0u);
  EXPECT_TRUE(r->Resident({*addr, kG}));
  // Dropped again, its chunk goes to the fetch that finds the pool at the budget; it is unmapped (its value dead).
  r->Drop({*addr, kG}, {}, false);
  r->Fetch({*addr + kG, kG}, {});
  r->Finish();
  EXPECT_EQ(r->stranded(), 0u);
  EXPECT_TRUE(r->Resident({*addr + kG, kG}));
  EXPECT_TRUE(Holds(*addr + kG, kG, 6));
  // Made again: a job now (it is on the host); the only chunk holds the fetched granule's live bytes, so the make
  // finds no room and the granule stays on its host chunk, usable.
  r->Make({*addr, kG}, {});
  r->Finish();
  EXPECT_EQ(r->stranded(), 1u);
  Fill(*addr, kG, 7);
  EXPECT_TRUE(Holds(*addr, kG, 7));
  EXPECT_EQ(r->peak_device_bytes(), kG);
}

// A make at the budget takes a dead granule's chunk and maps it while the host mapper unmaps the dead granule; it
// completes after that unmap, and the dead granule's addresses then lead nowhere.
TEST_F(CopyResidencyTest, AMakeMapsADeadGranulesChunkWhileTheDeadGranuleIsUnmapped) {
  auto r = Make(1);
  ASSERT_NE(r, nullptr);
  auto addr = r->Reserve(2 * kG, /*on_device=*/false);
  ASSERT_TRUE(addr.ok());
  const uint64_t dead = *addr, made = *addr + kG;
  for (uint64_t a : {dead, made, dead}) {  // each lane's threads past their first calls; `dead` holds the chunk
    r->Make({a, kG}, {});
    r->Finish();
    Fill(a, kG, 9);  // this thread's clock past the lanes' threads'
    r->Drop({a, kG}, {}, false);
  }
  const float ms = MsUntilDone(*r, [&] { return r->Make({made, kG}, {}); });
  r->Finish();
  const policy::HwProfile& p = policy::DefaultProfile();
  EXPECT_GT(ms * 1e-3, p.host.device_chunks.map_s + p.host.device_chunks.set_access_s);
  EXPECT_FALSE(r->Backed({dead, kG}));
  EXPECT_TRUE(r->Resident({made, kG}));
  Fill(made, kG, 10);
  EXPECT_TRUE(Holds(made, kG, 10));
  EXPECT_EQ(r->device_granules(), 1u);
  EXPECT_EQ(r->stranded(), 0u);
  EXPECT_TRUE(r->status().ok()) << r->status().message();
}

// A dropped value keeps its chunk, dead, whether it was freed or discarded to be rebuilt; a granule that needs a
// chunk takes a discarded value's before a freed one's (an allocator is likely to hand the freed addresses out again
// soon, where they revive in place), and the granule it took from is unmapped: a use nobody foresaw faults.
TEST_F(CopyResidencyTest, ADiscardedValueKeepsItsChunkUntilNeededAndGivesItBeforeAFreedOne) {
  auto r = Make(2);
  ASSERT_NE(r, nullptr);
  auto addr = r->Reserve(3 * kG);  // two granules on the device, the third on the host
  ASSERT_TRUE(addr.ok());
  Fill(*addr + 2 * kG, kG, 10);
  EXPECT_TRUE(r->Backed({*addr, 2 * kG}));
  EXPECT_FALSE(r->Backed({*addr, 3 * kG}));
  EXPECT_EQ(r->Drop({*addr, kG}, {}, /*held=*/false).seq, 0u);  // freed first
  EXPECT_EQ(r->Drop({*addr + kG, kG}, {}, /*held=*/true).seq, 0u);
  EXPECT_TRUE(r->Backed({*addr, 2 * kG}));  // both dead, both still on their chunks
  EXPECT_FALSE(r->Resident({*addr, kG}));
  r->Fetch({*addr + 2 * kG, kG}, {});
  r->Finish();
  EXPECT_EQ(r->stranded(), 0u);
  EXPECT_TRUE(r->Resident({*addr + 2 * kG, kG}));
  EXPECT_TRUE(Holds(*addr + 2 * kG, kG, 10));
  EXPECT_TRUE(r->Backed({*addr, kG}));        // the freed value kept its chunk
  EXPECT_FALSE(r->Backed({*addr + kG, kG}));  // the discarded one gave it
  CUmemGenericAllocationHandle h = 0;
  EXPECT_NE(cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(*addr + kG)), CUDA_SUCCESS);
  // The freed granule is revived in place; the discarded one, made again, finds no room and gets its host chunk.
  EXPECT_EQ(r->Make({*addr, kG}, {}).seq, 0u);
  r->Make({*addr + kG, kG}, {});
  r->Finish();
  EXPECT_EQ(r->stranded(), 1u);
  Fill(*addr + kG, kG, 11);
  EXPECT_TRUE(Holds(*addr + kG, kG, 11));
  EXPECT_EQ(r->peak_device_bytes(), 2 * kG);
}

TEST_F(CopyResidencyTest, MovesOfOneGranuleRunInTheOrderTheyWerePostedAcrossLanes) {
  auto r = Make(2);
  ASSERT_NE(r, nullptr);
  auto addr = r->Reserve(kG);
  ASSERT_TRUE(addr.ok());
  Fill(*addr, kG, 8);
  r->Evict({*addr, kG}, {});
  r->Fetch({*addr, kG}, {});
  r->Evict({*addr, kG}, {});
  r->Finish();
  EXPECT_EQ(r->device_granules(), 0u);
  EXPECT_TRUE(Holds(*addr, kG, 8));
}

TEST_F(CopyResidencyTest, AStreamWaitsForAFetchWithoutItsThreadWaiting) {
  auto r = Make(1);
  ASSERT_NE(r, nullptr);
  auto addr = r->Reserve(kG);
  ASSERT_TRUE(addr.ok());
  Fill(*addr, kG, 9);
  cudaStream_t app = nullptr;
  ASSERT_EQ(cudaStreamCreate(&app), cudaSuccess);
  cudaEvent_t last_use = nullptr;
  ASSERT_EQ(cudaEventCreate(&last_use), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(last_use, app), cudaSuccess);
  r->Evict({*addr, kG}, {&last_use, 1});
  const ResidencyTicket in = r->Fetch({*addr, kG}, {});
  ASSERT_TRUE(r->WaitOn(in, app).ok());
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, kG), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(pinned, reinterpret_cast<void*>(*addr), kG, cudaMemcpyDeviceToHost, app), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(app), cudaSuccess);
  EXPECT_TRUE(r->Done(in));
  EXPECT_EQ(r->device_granules(), 1u);
  EXPECT_EQ(static_cast<uint32_t*>(pinned)[1], 9 * 2654435761u + 1);
  cudaFreeHost(pinned);
  cudaEventDestroy(last_use);
  cudaStreamDestroy(app);
}

// The driver checks a copy's pointers at the call, and a make maps its range on a lane's thread: a copy right after
// the make can find the range unmapped, and is refused then (as on an H200). After AwaitSettled it never is.
TEST_F(CopyResidencyTest, ACopyRightAfterAMakeGoesThroughOnceSettled) {
  auto r = Make(64);
  ASSERT_NE(r, nullptr);
  std::vector<uint32_t> words(1024, 0x5eed);
  int refused = 0;
  for (bool settle : {false, true}) {
    for (int i = 0; i < 32; ++i) {
      auto b = r->Reserve(kG, /*on_device=*/false);  // unmapped until made
      ASSERT_TRUE(b.ok());
      r->Make({*b, kG}, {});
      if (settle) r->AwaitSettled({*b + kG / 2, 4096});
      const cudaError_t e = cudaMemcpy(reinterpret_cast<void*>(*b + kG / 2), words.data(), 4096,
                                       cudaMemcpyHostToDevice);
      if (settle) {
        EXPECT_EQ(e, cudaSuccess) << i;
      } else {
        EXPECT_TRUE(e == cudaSuccess || e == cudaErrorInvalidValue) << e;
        refused += e == cudaErrorInvalidValue;
      }
      cudaGetLastError();
      r->Finish();
      r->Release(*b);
    }
  }
  EXPECT_TRUE(r->status().ok()) << r->status().message();
  EXPECT_GT(refused, 0) << "no copy found its range unmapped: the lanes map at once here, which a GPU's do not";
}

TEST_F(CopyResidencyTest, AnEventCompletesWithTheMove) {
  auto r = Make(1);
  ASSERT_NE(r, nullptr);
  auto addr = r->Reserve(kG);
  ASSERT_TRUE(addr.ok());
  Fill(*addr, kG, 10);
  const ResidencyTicket out = r->Evict({*addr, kG}, {});
  cudaEvent_t done = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
  ASSERT_TRUE(r->RecordDone(out, done).ok());
  ASSERT_EQ(cudaEventSynchronize(done), cudaSuccess);
  EXPECT_TRUE(r->Done(out));
  EXPECT_EQ(r->device_granules(), 0u);
  cudaEventDestroy(done);
  r->Finish();
  EXPECT_TRUE(Holds(*addr, kG, 10));
}

// Each lane starts its moves in order and finishes them in order on another thread: the copies of evictions posted
// together go out back to back while the granules of the ones before them are remapped, so that n evictions take
// about n copies and one remap, not n of each: well under n copies and n/2 remaps (simulated time, the default
// profile's rates and host costs).
TEST_F(CopyResidencyTest, AMovesCopiesGoOutWhileTheMoveBeforeItIsRemapped) {
  constexpr int kMoves = 8;
  auto r = Make(kMoves);
  ASSERT_NE(r, nullptr);
  auto addr = r->Reserve(kMoves * kG);
  ASSERT_TRUE(addr.ok());
  r->Evict({*addr, kMoves * kG}, {});  // the host chunks made, the lanes' threads past their first calls
  r->Fetch({*addr, kMoves * kG}, {});
  r->Finish();
  const float ms = MsUntilDone(*r, [&] {
    ResidencyTicket last;
    for (int i = 0; i < kMoves; ++i) last = r->Evict({*addr + i * kG, kG}, {});
    return last;
  });
  const policy::HwProfile& p = policy::DefaultProfile();
  const double copy_s = static_cast<double>(kG) / p.copy.d2h_bw;
  // An eviction's remap: the device chunk's unmap, the host chunk's map and access change, one call at a time.
  const double remap_s = p.host.device_chunks.unmap_s + p.host.host_chunks.map_s + p.host.host_chunks.set_access_s;
  // One after the other (n copies and n remaps) would take longer: at least half of the copies overlap remaps.
  EXPECT_LT(ms * 1e-3, kMoves * (copy_s + remap_s) - (kMoves - 1) * copy_s / 2);
  EXPECT_GT(ms * 1e-3, kMoves * copy_s);  // the copy engine's time at least
  r->Finish();
  EXPECT_EQ(r->device_granules(), 0u);
}

TEST_F(CopyResidencyTest, RandomMovesNeverExceedTheBudgetNorLoseBytes) {
  constexpr uint64_t kGranules = 12, kBudget = 5;
  auto r = Make(kBudget);
  ASSERT_NE(r, nullptr);
  auto addr = r->Reserve(kGranules * kG);
  ASSERT_TRUE(addr.ok());
  for (uint64_t i = 0; i < kGranules; ++i) Fill(*addr + i * kG, kG, 100 + static_cast<uint32_t>(i));
  std::mt19937 rng(42);
  for (int step = 0; step < 60; ++step) {
    const uint64_t first = rng() % kGranules, count = 1 + rng() % 3;
    const ResidencyRange range{*addr + first * kG, std::min(count, kGranules - first) * kG};
    if (rng() % 2 == 0) {
      r->Evict(range, {});
    } else {
      r->Fetch(range, {});
    }
  }
  r->Finish();
  EXPECT_LE(r->peak_device_bytes(), kBudget * kG);
  EXPECT_LE(r->device_granules(), kBudget);
  for (uint64_t i = 0; i < kGranules; ++i) EXPECT_TRUE(Holds(*addr + i * kG, kG, 100 + static_cast<uint32_t>(i))) << i;
  EXPECT_TRUE(r->status().ok()) << r->status().message();
}

}  // namespace
}  // namespace karma::rt
