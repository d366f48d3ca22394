/* The contract between a program's kernels and simcuda: what stands in for an nvcc fat binary. */
#ifndef SIMCUDA_KERNEL_ABI_H_
#define SIMCUDA_KERNEL_ABI_H_

/*
 * nvcc registers a translation unit's kernels from a static initializer:
 *   handle = __cudaRegisterFatBinary(&wrapper);          // wrapper: __fatBinC_Wrapper_t, magic FATBINC_MAGIC
 *   __cudaRegisterFunction(handle, host_stub, ..., device_name, ...);   // once per kernel
 *   __cudaRegisterFatBinaryEnd(handle);
 * A program written for simcuda makes the same calls (so it links against the real libcudart), with a wrapper
 * whose `data` points at a simcuda_module instead of GPU code. Each simcuda_kernel carries what a GPU would get
 * from the cubin (name, parameter layout) plus a CPU body and an optional cost. The same image can be loaded
 * through the driver API: cuModuleLoadData(&module, &a_simcuda_module).
 *
 * This header is plain C and needs nothing from simcuda at link time.
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SIMCUDA_MODULE_MAGIC 0x434d4953u /* "SIMC" */
#define SIMCUDA_MODULE_VERSION 1u

/* One launch as the CPU body and the cost function see it. args[i] points at parameter i, as in cudaLaunchKernel. */
typedef struct simcuda_launch {
  void** args;
  unsigned grid[3];
  unsigned block[3];
  size_t shared_bytes;
} simcuda_launch;

/* A device address range a kernel touches; managed pages in it are made resident before the kernel runs. */
typedef struct simcuda_range {
  const void* ptr;
  size_t bytes;
} simcuda_range;

/* Filled by a kernel's cost function. The kernel's virtual duration is
 *   launch overhead + max(flops / F, bytes / B) + fault stalls
 * on the device profile. Ranges: up to max_ranges entries written to `ranges`; when a cost function declares
 * none, every pointer parameter that points into an allocation touches that whole allocation. */
typedef struct simcuda_cost {
  double flops;
  double bytes;
  simcuda_range* ranges;
  size_t max_ranges;
  size_t num_ranges;
} simcuda_cost;

typedef void (*simcuda_body_fn)(const simcuda_launch* launch);
typedef void (*simcuda_cost_fn)(const simcuda_launch* launch, simcuda_cost* cost);

typedef struct simcuda_kernel {
  const char* name;            /* the device function's name, as passed to __cudaRegisterFunction */
  unsigned num_params;
  const size_t* param_sizes;   /* sizeof of each parameter */
  const size_t* param_aligns;  /* alignof of each parameter: offsets follow the C layout of the parameter list */
  simcuda_body_fn body;        /* runs the kernel on the CPU, on the launching thread */
  simcuda_cost_fn cost;        /* may be NULL: no flops, bytes = the touched ranges */
} simcuda_kernel;

typedef struct simcuda_module {
  uint32_t magic;   /* SIMCUDA_MODULE_MAGIC */
  uint32_t version; /* SIMCUDA_MODULE_VERSION */
  size_t num_kernels;
  const simcuda_kernel* kernels;
} simcuda_module;

/* Appends a range to a cost. num_ranges counts every range declared; when it ends above max_ranges, simcuda
 * calls the cost function again with room for all of them. */
static inline void simcuda_add_range(simcuda_cost* cost, const void* ptr, size_t bytes) {
  if (cost->num_ranges < cost->max_ranges) {
    cost->ranges[cost->num_ranges].ptr = ptr;
    cost->ranges[cost->num_ranges].bytes = bytes;
  }
  cost->num_ranges++;
}

#ifdef __cplusplus
}
#endif

#endif /* SIMCUDA_KERNEL_ABI_H_ */
