// The built libkarma.so: its exported symbols are exactly the hook table and the public API, nothing of C++
// leaks, and, loaded over stand-in libcuda.so.1 / libcudart.so.13, lookups hand out its wrappers by the rules
// and the wrappers call the functions the lookups returned.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "interpose/hooks.h"

namespace {

std::string Shell(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

std::set<std::string> Expected() {
  std::set<std::string> names;
#define KARMA_EXPECT_HOOK(lib, ret, name, params, args, lookup) names.insert(#name);
  KARMA_HOOK_TABLE(KARMA_EXPECT_HOOK)
#undef KARMA_EXPECT_HOOK
#define KARMA_EXPECT_API(name) names.insert(#name);
  KARMA_PUBLIC_API(KARMA_EXPECT_API)
#undef KARMA_EXPECT_API
  return names;
}

TEST(LibkarmaTest, ExportsExactlyTheHookTableAndThePublicApi) {
  const std::string out = Shell(std::string("nm -D --defined-only ") + KARMA_LIB);
  ASSERT_FALSE(out.empty());
  std::set<std::string> exported;
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t eol = out.find('\n', pos);
    const std::string line = out.substr(pos, eol - pos);
    pos = eol == std::string::npos ? out.size() : eol + 1;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    std::string name = line.substr(sp + 1);
    if (name.find('@') != std::string::npos) name.resize(name.find('@'));
    exported.insert(name);
  }
  EXPECT_EQ(exported, Expected());
  for (const std::string& n : exported) {
    EXPECT_NE(n.rfind("_Z", 0), 0u) << "a C++ symbol leaks: " << n;
    EXPECT_EQ(n.find("karma::"), std::string::npos) << n;
  }
}

TEST(LibkarmaTest, NeedsNoCudaLibraryAndNoLibunwindAtLoadTime) {
  const std::string out = Shell(std::string("readelf -d ") + KARMA_LIB);
  ASSERT_NE(out.find("NEEDED"), std::string::npos);
  for (const char* lib : {"libcuda", "libcudart", "libcublas", "libcudnn", "libunwind", "libnvToolsExt"}) {
    EXPECT_EQ(out.find(lib), std::string::npos) << lib << " is a load-time dependency:\n" << out;
  }
}

// What a program started under LD_PRELOAD=libkarma.so finds in its environment (with the sanitizers, their
// runtime first, as it must be).
std::string PreloadedEnv(const std::string& vars) {
  std::string preload = KARMA_LIB;
  Dl_info asan{};
  if (void* init = dlsym(RTLD_DEFAULT, "__asan_init"); init != nullptr && dladdr(init, &asan) != 0) {
    preload = std::string(asan.dli_fname) + ":" + preload;
  }
  const std::string names =
      "PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF TF_GPU_ALLOCATOR XLA_PYTHON_CLIENT_ALLOCATOR "
      "XLA_PYTHON_CLIENT_PREALLOCATE";
  std::string unset;
  for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "TF_GPU_ALLOCATOR",
                           "XLA_PYTHON_CLIENT_ALLOCATOR", "XLA_PYTHON_CLIENT_PREALLOCATE", "KARMA_MODE"}) {
    unset += std::string(" -u ") + name;
  }
  return Shell("env" + unset + " " + vars + " ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 LD_PRELOAD=" +
               preload + " printenv " + names);
}

TEST(LibkarmaTest, SetsTheFrameworksAllocatorSwitchesAtLoad) {
  EXPECT_EQ(PreloadedEnv("KARMA_LIVE=0"),
            "backend:cudaMallocAsync\nbackend:cudaMallocAsync\ncuda_malloc_async\nplatform\nfalse\n");
  EXPECT_EQ(PreloadedEnv("KARMA_LIVE=0 KARMA_ALLOCATORS=keep"), "");
  EXPECT_EQ(PreloadedEnv("KARMA_LIVE=0 KARMA_MODE=um"), "");
  EXPECT_EQ(PreloadedEnv("KARMA_LIVE=0 PYTORCH_ALLOC_CONF=backend:native TF_GPU_ALLOCATOR=bfc"),
            "backend:native\nbfc\nplatform\nfalse\n");
}

class Loaded : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("KARMA_MODE", "um", 1);
    setenv("KARMA_LIVE", "0", 1);
    setenv("KARMA_ITERATION_MARKER", "train_step", 1);
    unsetenv("NVTX_INJECTION64_PATH");
    // The stand-ins first, by path: libkarma.so then finds them by their sonames, as it finds the real ones.
    cuda_ = dlopen(FAKE_CUDA_LIB, RTLD_NOW | RTLD_GLOBAL);
    cudart_ = dlopen(FAKE_CUDART_LIB, RTLD_NOW | RTLD_GLOBAL);
    karma_ = dlopen(KARMA_LIB, RTLD_NOW | RTLD_LOCAL);
  }
  template <typename F>
  static F Sym(void* lib, const char* name) {
    return reinterpret_cast<F>(dlsym(lib, name));
  }
  static inline void* cuda_ = nullptr;
  static inline void* cudart_ = nullptr;
  static inline void* karma_ = nullptr;
};

TEST_F(Loaded, EveryExportedNameResolves) {
  ASSERT_NE(karma_, nullptr) << dlerror();
  for (const std::string& n : Expected()) EXPECT_NE(dlsym(karma_, n.c_str()), nullptr) << n;
  EXPECT_STREQ(Sym<const char* (*)()>(karma_, "karma_version")(), "0.1.0");
  Sym<void (*)()>(karma_, "karma_iteration_begin")();
}

TEST_F(Loaded, AMissingLibraryGivesItsNotInitializedError) {
  ASSERT_NE(karma_, nullptr) << dlerror();
  // No libnvToolsExt.so.1 and no libcublas loaded in this process.
  EXPECT_EQ(Sym<int (*)()>(karma_, "nvtxRangePop")(), -2);
  using Sgemm = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float*,
                                   const float*, int, const float*, int, const float*, float*, int);
  EXPECT_EQ(Sym<Sgemm>(karma_, "cublasSgemm_v2")(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, nullptr, nullptr, 1,
                                                  nullptr, 1, nullptr, nullptr, 1),
            CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST_F(Loaded, ProcAddressHandsOutWrappersForExactlyTheHookedNames) {
  ASSERT_NE(karma_, nullptr) << dlerror();
  ASSERT_NE(cuda_, nullptr) << dlerror();
  auto lookup = Sym<CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*)>(
      karma_, "cuGetProcAddress_v2");
  auto get = [&](const char* name, int version, cuuint64_t flags = 0) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult st{};
    EXPECT_EQ(lookup(name, &p, version, flags, &st), CUDA_SUCCESS) << name;
    return p;
  };
  EXPECT_EQ(get("cuLaunchKernel", 12000), dlsym(karma_, "cuLaunchKernel"));
  EXPECT_EQ(get("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            dlsym(karma_, "cuLaunchKernel_ptsz"));
  EXPECT_EQ(get("cuMemAlloc", 12000), dlsym(karma_, "cuMemAlloc_v2"));
  EXPECT_EQ(get("cuGetProcAddress", 12000), dlsym(karma_, "cuGetProcAddress_v2"));
  // Not ours: the driver's answer, untouched.
  auto other = Sym<void* (*)(const char*)>(cuda_, "fake_cuda_impl")("other");
  EXPECT_EQ(get("cudnnCreate", 12000), other);
  EXPECT_EQ(get("cuMemAllocHost", 12000), other);
  EXPECT_NE(get("cuMemAlloc", 3010), dlsym(karma_, "cuMemAlloc_v2"));  // an older ABI: passed through
}

TEST_F(Loaded, WrappersHandedOutByALookupCallWhatTheLookupReturned) {
  ASSERT_NE(karma_, nullptr) << dlerror();
  auto lookup = Sym<CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*)>(
      karma_, "cuGetProcAddress_v2");
  using Launch = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
  void* legacy = nullptr;
  void* ptsz = nullptr;
  ASSERT_EQ(lookup("cuLaunchKernel", &legacy, 12000, 0, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(lookup("cuLaunchKernel", &ptsz, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr),
            CUDA_SUCCESS);
  const int before = Sym<int (*)()>(cuda_, "fake_cuda_launches")();
  const int before_ptsz = Sym<int (*)()>(cuda_, "fake_cuda_launches_ptsz")();
  EXPECT_EQ(reinterpret_cast<Launch>(legacy)(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<Launch>(ptsz)(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Sym<int (*)()>(cuda_, "fake_cuda_launches")(), before + 1);
  EXPECT_EQ(Sym<int (*)()>(cuda_, "fake_cuda_launches_ptsz")(), before_ptsz + 1);
}

TEST_F(Loaded, RuntimeEntryPointLookupsAreSubstitutedToo) {
  ASSERT_NE(karma_, nullptr) << dlerror();
  auto by_version = Sym<cudaError_t (*)(const char*, void**, unsigned, unsigned long long,
                                        cudaDriverEntryPointQueryResult*)>(karma_, "cudaGetDriverEntryPointByVersion");
  void* p = nullptr;
  cudaDriverEntryPointQueryResult st{};
  ASSERT_EQ(by_version("cuLaunchKernel", &p, 12000, cudaEnableDefault, &st), cudaSuccess);
  EXPECT_EQ(p, dlsym(karma_, "cuLaunchKernel"));
  ASSERT_EQ(by_version("cudnnGetVersion", &p, 12000, cudaEnableDefault, &st), cudaSuccess);
  EXPECT_NE(p, nullptr);
  EXPECT_NE(p, dlsym(karma_, "cudnnConvolutionForward"));
}

TEST_F(Loaded, DeviceAllocationsAreServedFromManagedMemory) {
  ASSERT_NE(karma_, nullptr) << dlerror();
  ASSERT_NE(cudart_, nullptr) << dlerror();
  auto malloc_fn = Sym<cudaError_t (*)(void**, size_t)>(karma_, "cudaMalloc");
  auto free_fn = Sym<cudaError_t (*)(void*)>(karma_, "cudaFree");
  const int mallocs = Sym<int (*)()>(cudart_, "fake_cudart_mallocs")();
  void* p = nullptr;
  ASSERT_EQ(malloc_fn(&p, 5 << 20), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (2 << 20), 0u);
  EXPECT_EQ(Sym<int (*)()>(cudart_, "fake_cudart_mallocs")(), mallocs);  // no real cudaMalloc
  EXPECT_GE(Sym<int (*)()>(cudart_, "fake_cudart_managed")(), 1);
  EXPECT_EQ(free_fn(p), cudaSuccess);
  EXPECT_EQ(Sym<int (*)()>(cudart_, "fake_cudart_frees")(), 0);  // no real cudaFree either
  // The memory info the application sees is the budget's, minus nothing held now: 0.9 of the 1 GiB the fake
  // device has free (of 2 GiB), not of its total.
  size_t free = 0, total = 0;
  ASSERT_EQ(Sym<cudaError_t (*)(size_t*, size_t*)>(karma_, "cudaMemGetInfo")(&free, &total), cudaSuccess);
  EXPECT_EQ(total, 2ull << 30);
  EXPECT_EQ(free, static_cast<size_t>(0.9 * (1ull << 30)));
}

// NVTX's side of the injection interface: one core function table whose slots the tool fills.
NvtxFunctionPointer g_slots[NVTX_CBID_CORE_SIZE] = {};
NvtxFunctionPointer* g_table[NVTX_CBID_CORE_SIZE];
int GetModuleFunctionTable(NvtxCallbackModule module, NvtxFunctionTable* out, unsigned int* size) {
  if (module != NVTX_CB_MODULE_CORE) return 0;
  for (int i = 0; i < NVTX_CBID_CORE_SIZE; ++i) g_table[i] = &g_slots[i];
  *out = g_table;
  *size = NVTX_CBID_CORE_SIZE;
  return 1;
}
const NvtxExportTableCallbacks g_callbacks{sizeof(NvtxExportTableCallbacks), &GetModuleFunctionTable};
const void* GetExportTable(uint32_t id) { return id == NVTX_ETID_CALLBACKS ? &g_callbacks : nullptr; }

TEST_F(Loaded, AnIterationMarkerMakesNvtxLoadKarmaAsItsTool) {
  ASSERT_NE(karma_, nullptr) << dlerror();
  const char* path = getenv("NVTX_INJECTION64_PATH");
  ASSERT_NE(path, nullptr);
  EXPECT_STREQ(path, KARMA_LIB);
}

TEST_F(Loaded, NvtxInjectionInstallsRangeCallbacks) {
  ASSERT_NE(karma_, nullptr) << dlerror();
  auto init = Sym<int (*)(NvtxGetExportTableFunc_t)>(karma_, "InitializeInjectionNvtx2");
  EXPECT_EQ(init(nullptr), 0);
  ASSERT_EQ(init(&GetExportTable), 1);
  auto push = reinterpret_cast<int (*)(const char*)>(g_slots[NVTX_CBID_CORE_RangePushA]);
  auto pop = reinterpret_cast<int (*)()>(g_slots[NVTX_CBID_CORE_RangePop]);
  ASSERT_NE(push, nullptr);
  ASSERT_NE(pop, nullptr);
  ASSERT_NE(g_slots[NVTX_CBID_CORE_RangePushEx], nullptr);
  EXPECT_EQ(g_slots[NVTX_CBID_CORE_MarkA], nullptr);  // only ranges
  EXPECT_EQ(push("outer"), 0);
  EXPECT_EQ(push("inner"), 1);
  EXPECT_EQ(pop(), 1);
  EXPECT_EQ(pop(), 0);
  EXPECT_LT(pop(), 0);  // unbalanced
}

}  // namespace
