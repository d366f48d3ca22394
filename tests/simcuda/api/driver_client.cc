// Loading a library's kernel module through libcuda.so.1's cuGetProcAddress (see driver_client.h).
#include "api/driver_client.h"

#include <dlfcn.h>

#include <string>

namespace simcuda_api {

const DriverModule* LoadDriverModule(const simcuda_module& module) {
  // This file is compiled into each API library: its own address names the library's directory.
  Dl_info info{};
  std::string path = "libcuda.so.1";
  if (dladdr(reinterpret_cast<void*>(&LoadDriverModule), &info) != 0 && info.dli_fname != nullptr) {
    const std::string self = info.dli_fname;
    const size_t slash = self.rfind('/');
    if (slash != std::string::npos) path = self.substr(0, slash + 1) + "libcuda.so.1";
  }
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return nullptr;
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get == nullptr) return nullptr;
  void* load = nullptr;
  void* function = nullptr;
  void* launch = nullptr;
  if (get("cuModuleLoadData", &load, CUDA_VERSION, 0, nullptr) != CUDA_SUCCESS ||
      get("cuModuleGetFunction", &function, CUDA_VERSION, 0, nullptr) != CUDA_SUCCESS ||
      get("cuLaunchKernel", &launch, CUDA_VERSION, 0, nullptr) != CUDA_SUCCESS) {
    return nullptr;
  }
  CUmodule loaded = nullptr;
  if (reinterpret_cast<CUresult (*)(CUmodule*, const void*)>(load)(&loaded, &module) != CUDA_SUCCESS) return nullptr;
  auto* d = new DriverModule;  // lives as long as the process, like the module
  d->launch = reinterpret_cast<LaunchKernelFn>(launch);
  for (size_t i = 0; i < module.num_kernels; ++i) {
    CUfunction f = nullptr;
    if (reinterpret_cast<CUresult (*)(CUfunction*, CUmodule, const char*)>(function)(
            &f, loaded, module.kernels[i].name) != CUDA_SUCCESS) {
      delete d;
      return nullptr;
    }
    d->kernels.push_back(f);
  }
  return d;
}

}  // namespace simcuda_api
