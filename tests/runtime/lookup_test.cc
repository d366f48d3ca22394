// The rules by which cuGetProcAddress / cudaGetDriverEntryPoint hand out a wrapper.
#include "interpose/lookup.h"

#include <gtest/gtest.h>

namespace karma::interpose {
namespace {

HookId Choose(const char* symbol, int version, uint64_t flags = 0) {
  return ChooseLookupHook(Hooks(), symbol, version, RequestedFlavor(flags));
}

TEST(LookupTest, ExactNamesOnly) {
  EXPECT_EQ(Choose("cuMemAlloc", 12000), HookId::cuMemAlloc_v2);
  EXPECT_EQ(Choose("cuMemFree", 13000), HookId::cuMemFree_v2);
  EXPECT_EQ(Choose("cuMemAllocHost", 12000), HookId::kCount);
  EXPECT_EQ(Choose("cuMemAllocPitch", 12000), HookId::kCount);
  EXPECT_EQ(Choose("cuMemAlloc_v2", 12000), HookId::kCount);  // lookups ask for base names
  EXPECT_EQ(Choose("cudnnCreate", 12000), HookId::kCount);
  EXPECT_EQ(Choose("cublasSgemm_v2", 12000), HookId::kCount);
  EXPECT_EQ(Choose("cudaMalloc", 12000), HookId::kCount);
  EXPECT_EQ(Choose("cu", 12000), HookId::kCount);
  EXPECT_EQ(Choose("", 12000), HookId::kCount);
  EXPECT_EQ(Choose(nullptr, 12000), HookId::kCount);
}

TEST(LookupTest, OnlyVersionsWithTheWrappersAbi) {
  // cuMemAlloc before 3.2 took 32-bit sizes.
  EXPECT_EQ(Choose("cuMemAlloc", 3010), HookId::kCount);
  EXPECT_EQ(Choose("cuMemAlloc", 3020), HookId::cuMemAlloc_v2);
  // cuGetProcAddress gained its status argument in 12.0: two wrappers, each for its range.
  EXPECT_EQ(Choose("cuGetProcAddress", 11020), HookId::kCount);
  EXPECT_EQ(Choose("cuGetProcAddress", 11030), HookId::cuGetProcAddress);
  EXPECT_EQ(Choose("cuGetProcAddress", 11080), HookId::cuGetProcAddress);
  EXPECT_EQ(Choose("cuGetProcAddress", 12000), HookId::cuGetProcAddress_v2);
  EXPECT_EQ(Choose("cuGetProcAddress", 13000), HookId::cuGetProcAddress_v2);
  EXPECT_EQ(Choose("cuLaunchKernelEx", 11050), HookId::kCount);
  EXPECT_EQ(Choose("cuLaunchKernelEx", 11060), HookId::cuLaunchKernelEx);
  EXPECT_EQ(Choose("cuLaunchCooperativeKernel", 8000), HookId::kCount);
  EXPECT_EQ(Choose("cuLaunchCooperativeKernel", 12000), HookId::cuLaunchCooperativeKernel);
  // The copies and memsets took 32-bit sizes before 3.2; cuMemcpy and cuMemcpyAsync came with 4.0.
  EXPECT_EQ(Choose("cuMemcpyHtoD", 3010), HookId::kCount);
  EXPECT_EQ(Choose("cuMemcpyHtoD", 3020), HookId::cuMemcpyHtoD_v2);
  EXPECT_EQ(Choose("cuMemsetD32Async", 3010), HookId::kCount);
  EXPECT_EQ(Choose("cuMemsetD32Async", 13000), HookId::cuMemsetD32Async);
  EXPECT_EQ(Choose("cuMemcpy", 3020), HookId::kCount);
  EXPECT_EQ(Choose("cuMemcpy", 4000), HookId::cuMemcpy);
  // cuMemcpyBatchAsync came with 12.8 (reporting the failing copy) and changed its ABI in 13.0 (_v2).
  EXPECT_EQ(Choose("cuMemcpyBatchAsync", 12070), HookId::kCount);
  EXPECT_EQ(Choose("cuMemcpyBatchAsync", 12080), HookId::cuMemcpyBatchAsync);
  EXPECT_EQ(Choose("cuMemcpyBatchAsync", 12090), HookId::cuMemcpyBatchAsync);
  EXPECT_EQ(Choose("cuMemcpyBatchAsync", 13000), HookId::cuMemcpyBatchAsync_v2);
}

TEST(LookupTest, StreamFlavours) {
  EXPECT_EQ(RequestedFlavor(CU_GET_PROC_ADDRESS_DEFAULT), StreamFlavor::kLegacyStream);
  EXPECT_EQ(RequestedFlavor(CU_GET_PROC_ADDRESS_LEGACY_STREAM), StreamFlavor::kLegacyStream);
  EXPECT_EQ(RequestedFlavor(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), StreamFlavor::kPerThreadStream);
  EXPECT_EQ(RequestedFlavor(cudaEnablePerThreadDefaultStream), StreamFlavor::kPerThreadStream);
  const uint64_t ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  EXPECT_EQ(Choose("cuLaunchKernel", 12000), HookId::cuLaunchKernel);
  EXPECT_EQ(Choose("cuLaunchKernel", 12000, ptds), HookId::cuLaunchKernel_ptsz);
  EXPECT_EQ(Choose("cuLaunchKernel", 6050, ptds), HookId::kCount);  // no _ptsz before 7.0
  EXPECT_EQ(Choose("cuLaunchKernelEx", 12000, ptds), HookId::cuLaunchKernelEx_ptsz);
  EXPECT_EQ(Choose("cuLaunchCooperativeKernel", 13000, ptds), HookId::cuLaunchCooperativeKernel_ptsz);
  EXPECT_EQ(Choose("cuMemAllocAsync", 12000, ptds), HookId::cuMemAllocAsync_ptsz);
  EXPECT_EQ(Choose("cuMemFreeAsync", 12000), HookId::cuMemFreeAsync);
  // Synchronous copies and memsets use the default stream: their per-thread forms are the _ptds ones.
  EXPECT_EQ(Choose("cuMemcpyHtoD", 12000, ptds), HookId::cuMemcpyHtoD_v2_ptds);
  EXPECT_EQ(Choose("cuMemcpyHtoDAsync", 12000), HookId::cuMemcpyHtoDAsync_v2);
  EXPECT_EQ(Choose("cuMemcpyHtoDAsync", 12000, ptds), HookId::cuMemcpyHtoDAsync_v2_ptsz);
  EXPECT_EQ(Choose("cuMemsetD8", 13000, ptds), HookId::cuMemsetD8_v2_ptds);
  EXPECT_EQ(Choose("cuMemsetD16Async", 13000, ptds), HookId::cuMemsetD16Async_ptsz);
  EXPECT_EQ(Choose("cuMemcpy", 12000, ptds), HookId::cuMemcpy_ptds);
  EXPECT_EQ(Choose("cuMemcpy", 6050, ptds), HookId::kCount);
  EXPECT_EQ(Choose("cuMemcpyBatchAsync", 12080, ptds), HookId::cuMemcpyBatchAsync_ptsz);
  EXPECT_EQ(Choose("cuMemcpyBatchAsync", 13000, ptds), HookId::cuMemcpyBatchAsync_v2_ptsz);
  // Functions without a stream have one flavour.
  EXPECT_EQ(Choose("cuMemAlloc", 12000, ptds), HookId::cuMemAlloc_v2);
  EXPECT_EQ(Choose("cuMemGetInfo", 12000, ptds), HookId::cuMemGetInfo_v2);
}

}  // namespace
}  // namespace karma::interpose
