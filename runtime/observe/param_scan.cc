// Parameter layouts and argument scanning.
#include "runtime/observe/param_scan.h"

#include <algorithm>
#include <cstring>

namespace karma::rt {
namespace {

// CUDA 12.1+ allows 32764 bytes of parameters; no kernel has more parameters than that.
constexpr size_t kMaxParams = 32764;
// `extra` is a short list of (key, value) pairs; a longer one is not a valid array.
constexpr int kMaxExtraPairs = 64;

// Calls f(word) for every aligned 8-byte word of [p, p + size).
template <typename F>
void EachWord(const void* p, size_t size, F f) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (size_t off = 0; off + sizeof(uint64_t) <= size; off += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, bytes + off, sizeof(word));  // arguments need not be 8-byte aligned in host memory
    f(word);
  }
}

// A visitor that records every word pointing into a registered buffer.
auto Collector(const Registry::Reader& registry, std::vector<PointerHit>* hits) {
  return [&registry, hits](uint64_t word) {
    if (word == 0) return;
    if (const BufferEntry* e = registry.Find(word)) hits->push_back(PointerHit{word, *e});
  };
}

}  // namespace

const ParamLayout& ParamLayouts::ForRuntime(const void* func) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = layouts_.try_emplace(func);
  if (!inserted || api_.cudaFuncGetParamInfo == nullptr) return it->second;
  ParamLayout& l = it->second;
  // Parameters are counted by asking for index 0, 1, ... until the index is out of range; that last call
  // always fails, and its error must not reach the application's cudaGetLastError.
  LastErrorScope errors(api_);
  for (size_t i = 0; i < kMaxParams; ++i) {
    size_t offset = 0, size = 0;
    const cudaError_t e = api_.cudaFuncGetParamInfo(func, i, &offset, &size);
    if (e != cudaSuccess) {
      errors.Failed();
      l.known = e == cudaErrorInvalidValue;
      break;
    }
    l.params.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
  }
  return l;
}

const ParamLayout& ParamLayouts::ForDriver(CUfunction func) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = layouts_.try_emplace(static_cast<const void*>(func));
  if (!inserted || api_.cuFuncGetParamInfo == nullptr) return it->second;
  ParamLayout& l = it->second;
  for (size_t i = 0; i < kMaxParams; ++i) {
    size_t offset = 0, size = 0;
    const CUresult e = api_.cuFuncGetParamInfo(func, i, &offset, &size);
    if (e != CUDA_SUCCESS) {
      l.known = e == CUDA_ERROR_INVALID_VALUE;
      break;
    }
    l.params.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
  }
  return l;
}

void ScanKernelArgs(const ParamLayout& layout, void* const* args, const Registry::Reader& registry,
                    std::vector<PointerHit>* hits) {
  if (!layout.known || args == nullptr) return;
  for (size_t i = 0; i < layout.params.size(); ++i) {
    // Parameters shorter than a pointer cannot hold one.
    const size_t size = std::min<size_t>(layout.params[i].size, kMaxParams);
    if (args[i] != nullptr && size >= sizeof(uint64_t)) EachWord(args[i], size, Collector(registry, hits));
  }
}

void ScanArgBuffer(const void* data, size_t size, const Registry::Reader& registry, std::vector<PointerHit>* hits) {
  if (data != nullptr) EachWord(data, std::min<size_t>(size, kMaxParams), Collector(registry, hits));
}

bool FindExtraBuffer(void* const* extra, const void** data, size_t* size) {
  if (extra == nullptr) return false;
  const void* buffer = nullptr;
  const size_t* buffer_size = nullptr;
  for (int i = 0; i < kMaxExtraPairs && extra[2 * i] != CU_LAUNCH_PARAM_END; ++i) {
    if (extra[2 * i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = extra[2 * i + 1];
    if (extra[2 * i] == CU_LAUNCH_PARAM_BUFFER_SIZE) buffer_size = static_cast<const size_t*>(extra[2 * i + 1]);
  }
  if (buffer == nullptr || buffer_size == nullptr) return false;
  *data = buffer;
  *size = *buffer_size;
  return true;
}

}  // namespace karma::rt
