// Registered kernels: nvcc-style registration (host stub -> kernel) and driver-API modules, over simcuda images.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "simcuda/kernel_abi.h"

// The opaque handle types of the CUDA headers are defined here: a CUfunction (cudaFunction_t) is a kernel, a
// CUmodule a loaded image. cudaKernel_t (CUkern_st*) is the same object as the CUfunction.
struct CUfunc_st {
  std::string name;
  std::vector<size_t> param_offsets;
  std::vector<size_t> param_sizes;
  simcuda_body_fn body = nullptr;
  simcuda_cost_fn cost = nullptr;
  CUmod_st* module = nullptr;
};

struct CUmod_st {
  bool simcuda_image = false;  // false: a real GPU fat binary, whose kernels cannot run here
  std::vector<std::unique_ptr<CUfunc_st>> functions;
  std::vector<const void*> host_stubs;  // registered through __cudaRegisterFunction
};

namespace simcuda {

class KernelRegistry {
 public:
  // Loads an image: a simcuda_module, or anything else (then a module without kernels). Never null.
  CUmod_st* Load(const void* image);
  // From __cudaRegisterFatBinary's argument: a __fatBinC_Wrapper_t whose data may be a simcuda_module.
  CUmod_st* LoadFatBinary(const void* fat_cubin);
  bool Unload(CUmod_st* module);
  bool IsModule(const CUmod_st* module) const;

  // The kernel named `name` in `module`, or null.
  CUfunc_st* Find(CUmod_st* module, const char* name);
  // Binds a host stub to the kernel named `device_name`; false when the module has no such kernel.
  bool BindHostStub(CUmod_st* module, const void* host_stub, const char* device_name);
  CUfunc_st* ByHostStub(const void* host_stub) const;
  bool IsFunction(const CUfunc_st* fn) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<CUmod_st>> modules_;
  std::unordered_set<const CUfunc_st*> functions_;
  std::unordered_map<const void*, CUfunc_st*> by_stub_;
};

// Byte offsets of parameters laid out like a C struct of the given sizes and alignments.
std::vector<size_t> ParamOffsets(const size_t* sizes, const size_t* aligns, unsigned count);

}  // namespace simcuda
