// Library names and sonames, and filling the CUDA function table from a resolver.
#include "runtime/base/cuda_api.h"

#include <atomic>

namespace karma::rt {
namespace {

constexpr const char* kCudartSonames[] = {"libcudart.so.13", "libcudart.so.12"};
constexpr const char* kDriverSonames[] = {"libcuda.so.1"};
constexpr const char* kCublasSonames[] = {"libcublas.so.13", "libcublas.so.12"};
constexpr const char* kCudnnSonames[] = {"libcudnn.so.9"};
constexpr const char* kNvtxSonames[] = {"libnvToolsExt.so.1"};

std::atomic<SymbolResolver> g_resolver{nullptr};

}  // namespace

const char* CudaLibName(CudaLib lib) {
  switch (lib) {
    case CudaLib::kCudart: return "cudart";
    case CudaLib::kDriver: return "driver";
    case CudaLib::kCublas: return "cublas";
    case CudaLib::kCudnn: return "cudnn";
    case CudaLib::kNvtx: return "nvtx";
  }
  return "?";
}

std::span<const char* const> CudaLibSonames(CudaLib lib) {
  switch (lib) {
    case CudaLib::kCudart: return kCudartSonames;
    case CudaLib::kDriver: return kDriverSonames;
    case CudaLib::kCublas: return kCublasSonames;
    case CudaLib::kCudnn: return kCudnnSonames;
    case CudaLib::kNvtx: return kNvtxSonames;
  }
  return {};
}

CudaApi LoadCudaApi(SymbolResolver resolve) {
  CudaApi api;
  if (resolve == nullptr) return api;
#define KARMA_CUDA_API_LOAD(lib, name) \
  api.name = reinterpret_cast<decltype(api.name)>(resolve(CudaLib::lib, #name));
  KARMA_CUDA_API_TABLE(KARMA_CUDA_API_LOAD)
#undef KARMA_CUDA_API_LOAD
  return api;
}

LastErrorScope::LastErrorScope(const CudaApi& api) : api_(api) {
  clean_before_ = api_.cudaPeekAtLastError != nullptr && api_.cudaPeekAtLastError() == cudaSuccess;
}

LastErrorScope::~LastErrorScope() {
  if (failed_ && clean_before_ && api_.cudaGetLastError != nullptr) (void)api_.cudaGetLastError();
}

bool RealMemGetInfo(const CudaApi& api, size_t* free, size_t* total) {
  if (api.cudaMemGetInfo == nullptr) return false;
  LastErrorScope errors(api);
  if (api.cudaMemGetInfo(free, total) == cudaSuccess) return true;
  errors.Failed();
  return false;
}

void SetRealSymbolResolver(SymbolResolver resolve) { g_resolver.store(resolve, std::memory_order_release); }
SymbolResolver RealSymbolResolver() { return g_resolver.load(std::memory_order_acquire); }

}  // namespace karma::rt
