// Deterministic 2-D convolutions on the CPU (fp32, NCHW): the arithmetic behind the simulated cuDNN.
#pragma once

#include <cstddef>
#include <cstdint>

namespace simcuda {

// One convolution: x is N x C x H x W, the filter K x C x R x S (packed), y N x K x P x Q. Strides are in
// elements, for the n, c/k, h, w dimensions; the filter is always packed. Plain data: it is a kernel parameter.
struct ConvGeometry {
  int64_t n, c, h, w;
  int64_t k, r, s;
  int64_t p, q;
  int64_t pad_h, pad_w, stride_h, stride_w, dil_h, dil_w;
  int64_t flip;  // 1: CUDNN_CONVOLUTION (the filter is applied mirrored); 0: cross-correlation
  int64_t x_strides[4];
  int64_t y_strides[4];
};

// The output size of one spatial dimension (0 or less when the filter does not fit).
int64_t ConvOutputSize(int64_t in, int64_t filter, int64_t pad, int64_t stride, int64_t dilation);

// Floats of the column buffer (C*R*S x P*Q: one image unrolled) the three functions work through.
size_t ConvColumnFloats(const ConvGeometry& g);
// Multiply-adds times two: the work of each of the three functions.
double ConvFlops(const ConvGeometry& g);
// Bytes from the first to one past the last element of a tensor of the given dimensions and strides.
size_t ConvSpanBytes(const int64_t dims[4], const int64_t strides[4]);

// Each function unrolls one image at a time into `col` (ConvColumnFloats floats: the workspace, or scratch) and
// multiplies with simcuda::Sgemm, images in order: every result depends only on the operands' values. The output
// is alpha * result + beta * output; beta == 0 ignores the output's old contents (NaN included).
// y = conv(x, w)
void ConvForward(const ConvGeometry& g, float alpha, const float* x, const float* w, float beta, float* y,
                 float* col);
// dx = the gradient of conv with respect to x, for the output gradient dy (laid out as y)
void ConvBackwardData(const ConvGeometry& g, float alpha, const float* w, const float* dy, float beta, float* dx,
                      float* col);
// dw = the gradient with respect to the filter, summed over the images in order
void ConvBackwardFilter(const ConvGeometry& g, float alpha, const float* x, const float* dy, float beta, float* dw,
                        float* col);

}  // namespace simcuda
