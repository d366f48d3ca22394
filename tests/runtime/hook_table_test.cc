// What the hook table generates: ids, names, libraries, lookup rules, real-symbol slots, the CUDA function
// table the session uses.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "interpose/hooks.h"
#include "interpose/lookup.h"
#include "interpose/real.h"

namespace karma::interpose {
namespace {

TEST(HookTableTest, IdsNamesAndLibrariesAreConsistent) {
  const auto hooks = Hooks();
  ASSERT_EQ(hooks.size(), kHookCount);
  std::set<std::string> names;
  for (size_t i = 0; i < hooks.size(); ++i) {
    const HookInfo& h = hooks[i];
    EXPECT_EQ(static_cast<size_t>(h.id), i);
    ASSERT_NE(h.name, nullptr);
    EXPECT_TRUE(names.insert(h.name).second) << "listed twice: " << h.name;
    const std::string n = h.name;
    // A library's symbols share its prefix; `cu` alone is also the prefix of cudnn and cublas. libcudart's entry
    // points for nvcc's generated code start with `__cuda`.
    rt::CudaLib expected = rt::CudaLib::kDriver;
    if (n.rfind("cudnn", 0) == 0) expected = rt::CudaLib::kCudnn;
    else if (n.rfind("cublas", 0) == 0) expected = rt::CudaLib::kCublas;
    else if (n.rfind("cuda", 0) == 0 || n.rfind("__cuda", 0) == 0) expected = rt::CudaLib::kCudart;
    else if (n.rfind("nvtx", 0) == 0) expected = rt::CudaLib::kNvtx;
    EXPECT_EQ(h.lib, expected) << n;
  }
  EXPECT_EQ(&InfoOf(HookId::cudaMalloc), &hooks[static_cast<size_t>(HookId::cudaMalloc)]);
  EXPECT_STREQ(InfoOf(HookId::cuGetProcAddress_v2).name, "cuGetProcAddress_v2");
}

TEST(HookTableTest, EveryDriverHookCanBeHandedOutByALookupAndNothingElse) {
  for (const HookInfo& h : Hooks()) {
    const LookupRule& r = h.lookup;
    if (h.lib != rt::CudaLib::kDriver) {
      EXPECT_EQ(r.name, nullptr) << h.name;
      continue;
    }
    ASSERT_NE(r.name, nullptr) << h.name;
    // The symbol asked for is the hook's name without its ABI suffix.
    EXPECT_EQ(std::string(h.name).rfind(r.name, 0), 0u) << h.name;
    EXPECT_GT(r.min_version, 0) << h.name;
    if (r.end_version != 0) {
      EXPECT_LT(r.min_version, r.end_version) << h.name;
    }
    // Round trip: asking for it at its first version and flavour gives this hook.
    const StreamFlavor f = r.flavor == StreamFlavor::kPerThreadStream ? StreamFlavor::kPerThreadStream
                                                                       : StreamFlavor::kLegacyStream;
    EXPECT_EQ(ChooseLookupHook(Hooks(), r.name, r.min_version, f), h.id) << h.name;
  }
}

TEST(HookTableTest, AMissingRealFunctionIsNotFatal) {
  // No libnvToolsExt and no libcuda here: the slots stay empty and the wrappers would return these.
  EXPECT_EQ(RealOf(HookId::nvtxRangePop), nullptr);
  EXPECT_EQ(ResolveReal(rt::CudaLib::kNvtx, "nvtxRangePop"), nullptr);
  EXPECT_EQ(MissingError(rt::CudaLib::kCudart), cudaErrorInitializationError);
  EXPECT_EQ(MissingError(rt::CudaLib::kDriver), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(MissingError(rt::CudaLib::kCublas), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(MissingError(rt::CudaLib::kCudnn), CUDNN_STATUS_NOT_INITIALIZED);
}

int Answer() { return 42; }

TEST(HookTableTest, ALookupCanSetTheRealFunction) {
  SetReal(HookId::nvtxRangePop, reinterpret_cast<void*>(&Answer));
  EXPECT_EQ(Real<int (*)()>(HookId::nvtxRangePop)(), 42);
}

TEST(HookTableTest, ReentryGuard) {
  EXPECT_FALSE(InHook());
  {
    HookScope scope;
    EXPECT_TRUE(InHook());
  }
  EXPECT_FALSE(InHook());
}

std::vector<std::pair<rt::CudaLib, std::string>>* g_asked = nullptr;
void* Recorder(rt::CudaLib lib, const char* name) {
  g_asked->emplace_back(lib, name);
  return nullptr;
}

TEST(HookTableTest, TheSessionTableIsFilledFromTheResolver) {
  std::vector<std::pair<rt::CudaLib, std::string>> asked;
  g_asked = &asked;
  const rt::CudaApi api = rt::LoadCudaApi(&Recorder);
  EXPECT_EQ(asked.size(), static_cast<size_t>(rt::CudaApiId::kCount));
  EXPECT_EQ(api.cudaMallocManaged, nullptr);
  bool saw_managed = false, saw_param_info = false;
  for (const auto& [lib, name] : asked) {
    saw_managed |= lib == rt::CudaLib::kCudart && name == "cudaMallocManaged";
    saw_param_info |= lib == rt::CudaLib::kDriver && name == "cuFuncGetParamInfo";
  }
  EXPECT_TRUE(saw_managed);
  EXPECT_TRUE(saw_param_info);
  EXPECT_FALSE(rt::CudaLibSonames(rt::CudaLib::kCudart).empty());
  EXPECT_STREQ(rt::CudaLibSonames(rt::CudaLib::kDriver)[0], "libcuda.so.1");
}

}  // namespace
}  // namespace karma::interpose
