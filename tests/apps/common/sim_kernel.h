// Kernels without nvcc: what `__global__`, `<<<...>>>` and nvcc's registration code become for simcuda.
#pragma once

#include <cuda_runtime_api.h>
#include <fatbinary_section.h>

#include <cstdlib>
#include <tuple>
#include <utility>

#include "simcuda/kernel_abi.h"
#include "simcuda/nvcc_entry_points.h"

namespace apps {

// A kernel is a struct:
//   struct Scale {
//     static constexpr const char* kName = "scale";
//     static void Body(int64_t n, float a, float* x);                   // the CPU implementation
//     static void Cost(simcuda_cost* c, int64_t n, float a, float* x);  // flops, bytes, touched ranges
//   };
// launched with apps::Launch<Scale>(grid, block, stream, n, a, x), i.e. scale<<<grid, block, 0, stream>>>(...),
// and registered, once per translation unit, by a static apps::Module<Scale, ...> object.
template <typename K, typename Signature = decltype(&K::Body)>
struct KernelOf;

template <typename K, typename... P>
struct KernelOf<K, void (*)(P...)> {
  // The host stub nvcc emits for a __global__ function: its address is the kernel's identity. As nvcc 13 emits
  // it (crt/host_runtime.h), the stub looks the kernel's handle up once and launches it with __cudaLaunchKernel,
  // which the real libcudart serves without calling its exported cudaLaunchKernel; a program built with
  // APPS_LEGACY_LAUNCH launches as nvcc does with -D__NV_LEGACY_LAUNCH (and as nvcc 12 did): cudaLaunchKernel.
  static void Stub(P... p) {
#ifndef APPS_LEGACY_LAUNCH
    static cudaKernel_t handle = nullptr;
    static const bool found = __cudaGetKernel(&handle, reinterpret_cast<const void*>(&Stub)) == cudaSuccess;
    (void)found;
#endif
    dim3 grid, block;
    size_t shared = 0;
    cudaStream_t stream = nullptr;
    if (__cudaPopCallConfiguration(&grid, &block, &shared, &stream) != cudaSuccess) return;
    void* args[] = {static_cast<void*>(&p)..., nullptr};
    // APPS_COOPERATIVE_LAUNCH=1 in the environment: every kernel through cudaLaunchCooperativeKernel, as a library
    // whose kernels synchronize the whole grid launches them (tests/e2e's case cooperative).
    static const bool cooperative = std::getenv("APPS_COOPERATIVE_LAUNCH") != nullptr;
    if (cooperative) {
      (void)cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(&Stub), grid, block, args, shared, stream);
      return;
    }
#ifdef APPS_LEGACY_LAUNCH
    (void)cudaLaunchKernel(reinterpret_cast<const void*>(&Stub), grid, block, args, shared, stream);
#else
    (void)__cudaLaunchKernel(handle, grid, block, args, shared, stream);
#endif
  }

  static void RunBody(const simcuda_launch* l) { CallBody(l, std::index_sequence_for<P...>{}); }
  static void RunCost(const simcuda_launch* l, simcuda_cost* c) { CallCost(l, c, std::index_sequence_for<P...>{}); }

  static constexpr size_t kSizes[] = {sizeof(P)..., 0};
  static constexpr size_t kAligns[] = {alignof(P)..., 1};
  static simcuda_kernel Descriptor() {
    return {K::kName, static_cast<unsigned>(sizeof...(P)), kSizes, kAligns, &RunBody, &RunCost};
  }

 private:
  template <size_t... I>
  static void CallBody(const simcuda_launch* l, std::index_sequence<I...>) {
    K::Body(*static_cast<P*>(l->args[I])...);
  }
  template <size_t... I>
  static void CallCost(const simcuda_launch* l, simcuda_cost* c, std::index_sequence<I...>) {
    K::Cost(c, *static_cast<P*>(l->args[I])...);
  }
};

// kernel<<<grid, block, 0, stream>>>(args...): push the configuration, call the stub. Errors are reported by
// cudaGetLastError, as with <<<>>>.
template <typename K, typename... A>
void Launch(dim3 grid, dim3 block, cudaStream_t stream, A&&... args) {
  __cudaPushCallConfiguration(grid, block, 0, stream);
  KernelOf<K>::Stub(std::forward<A>(args)...);
}

// Registers kernels as one module from a static initializer, with the calls nvcc's generated code makes; the
// "fat binary" carries a simcuda_module instead of GPU code. Unregistered at exit, as nvcc does.
template <typename... K>
class Module {
 public:
  Module() {
    static const simcuda_kernel kernels[] = {KernelOf<K>::Descriptor()...};
    static const simcuda_module image = {SIMCUDA_MODULE_MAGIC, SIMCUDA_MODULE_VERSION, sizeof...(K), kernels};
    static const __fatBinC_Wrapper_t wrapper = {FATBINC_MAGIC, FATBINC_VERSION,
                                                reinterpret_cast<const unsigned long long*>(&image), nullptr};
    handle_ = __cudaRegisterFatBinary(const_cast<__fatBinC_Wrapper_t*>(&wrapper));
    (__cudaRegisterFunction(handle_, reinterpret_cast<const char*>(&KernelOf<K>::Stub), const_cast<char*>(K::kName),
                            K::kName, -1, nullptr, nullptr, nullptr, nullptr, nullptr),
     ...);
    __cudaRegisterFatBinaryEnd(handle_);
    std::atexit(&Unregister);
  }

 private:
  static void Unregister() { __cudaUnregisterFatBinary(handle_); }
  static inline void** handle_ = nullptr;
};

}  // namespace apps
