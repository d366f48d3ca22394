// Shared by the device model's source files: the checks every entry point makes.
#pragma once

// Once the context is lost (Device::Lose), every call returns that error.
#define SIMCUDA_RETURN_IF_LOST()                  \
  do {                                            \
    if (lost_ != cudaSuccess) return lost_;       \
  } while (0)

#define SIMCUDA_RETURN_IF_ERROR(expr)             \
  do {                                            \
    const cudaError_t simcuda_e_ = (expr);        \
    if (simcuda_e_ != cudaSuccess) return simcuda_e_; \
  } while (0)
