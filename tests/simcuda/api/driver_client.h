// How simcuda's cuBLAS and cuDNN run their work: a module of kernels loaded and launched through the driver API.
#pragma once

#include <cuda.h>

#include <vector>

#include "simcuda/kernel_abi.h"

namespace simcuda_api {

using LaunchKernelFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, CUstream, void**, void**);

struct DriverModule {
  LaunchKernelFn launch = nullptr;
  std::vector<CUfunction> kernels;  // in the module's order
};

// Like the real libraries, which reach the driver through cuGetProcAddress from their static runtime: loads
// libcuda.so.1 from the directory of the calling library, resolves cuModuleLoadData, cuModuleGetFunction and
// cuLaunchKernel through cuGetProcAddress_v2, and loads `module`. A tool that hooks the driver's entry points
// sees the work as kernels with the operands among their parameters. Null when any step fails.
const DriverModule* LoadDriverModule(const simcuda_module& module);

}  // namespace simcuda_api
