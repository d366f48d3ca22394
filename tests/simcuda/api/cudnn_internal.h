// What the legacy and the backend halves of simcuda's libcudnn.so.9 share: the handle and the convolution kernels.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>

#include "device/conv.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

namespace simcuda_cudnn {

enum class ConvKind { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

// The geometry of a 2-D convolution from dimensions and element strides (n, c, h, w) of x and y, the filter's
// dimensions (k, c, r, s; packed) and the convolution's pads, strides and dilations (height, width).
// CUDNN_STATUS_BAD_PARAM for inconsistent values: y not N x K x P x Q, channel counts that differ, a filter
// that does not fit, non-positive sizes.
cudnnStatus_t MakeGeometry(const int64_t x_dims[4], const int64_t x_strides[4], const int64_t w_dims[4],
                           const int64_t y_dims[4], const int64_t y_strides[4], const int64_t pad[2],
                           const int64_t stride[2], const int64_t dilation[2], bool flip,
                           simcuda::ConvGeometry* g);

// Bytes of the workspace of the algorithms that unroll images into it (GEMM, ALGO_1, the backend's engine 0).
size_t ColumnWorkspaceBytes(const simcuda::ConvGeometry& g);
// What one of the kernels would take on the device's profile, without faults (the "time" of algorithm searches).
float EstimatedMs(const simcuda::ConvGeometry& g);

// True when the driver and the kernel module are loaded (cudnnCreate fails otherwise).
bool KernelsReady();

// Enqueues one convolution on the handle's stream as a simcuda kernel whose ranges are exactly the operands:
// forward (a = x, b = w, out = y), backward data (a = w, b = dy, out = dx), backward filter (a = x, b = dy,
// out = dw). `workspace`, when not null, receives the column buffer (ColumnWorkspaceBytes); when null the
// kernel works in host scratch memory. CUDNN_STATUS_EXECUTION_FAILED when the launch fails.
cudnnStatus_t Launch(cudnnHandle_t handle, ConvKind kind, const simcuda::ConvGeometry& g, float alpha, float beta,
                     const void* a, const void* b, void* out, void* workspace);

}  // namespace simcuda_cudnn
