// Kernel parameter layouts (cudaFuncGetParamInfo / cuFuncGetParamInfo) and the scan of a launch's arguments
// for pointers into registered buffers.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/base/cuda_api.h"
#include "runtime/observe/ops.h"
#include "runtime/observe/registry.h"

namespace karma::rt {

struct ParamLayout {
  bool known = false;  // false: the parameter sizes could not be queried, so the arguments cannot be read
  struct Param {
    uint32_t offset = 0;
    uint32_t size = 0;
  };
  std::vector<Param> params;
};

// The layouts of the kernels seen so far, queried once per function. Thread-safe.
class ParamLayouts {
 public:
  explicit ParamLayouts(const CudaApi& api) : api_(api) {}
  const ParamLayout& ForRuntime(const void* func);
  const ParamLayout& ForDriver(CUfunction func);

 private:
  const CudaApi& api_;
  std::mutex mu_;
  std::unordered_map<const void*, ParamLayout> layouts_;
};

// One word of the arguments that points into a registered buffer.
struct PointerHit {
  uint64_t value = 0;  // the pointer as passed (may point inside the buffer)
  BufferEntry buffer;
};

// Appends a hit for every 8-byte-aligned word of every parameter (struct parameters included) that lies inside
// a registered buffer. Parameters shorter than a pointer cannot hold one and are skipped.
void ScanKernelArgs(const ParamLayout& layout, void* const* args, const Registry::Reader& registry,
                    std::vector<PointerHit>* hits);
// The same over a packed argument buffer (cuLaunchKernel's `extra` CU_LAUNCH_PARAM_BUFFER_POINTER).
void ScanArgBuffer(const void* data, size_t size, const Registry::Reader& registry, std::vector<PointerHit>* hits);
// Finds the packed buffer in a cuLaunchKernel `extra` array; false when there is none.
bool FindExtraBuffer(void* const* extra, const void** data, size_t* size);

}  // namespace karma::rt
