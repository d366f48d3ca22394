// Convolutions as im2col + the deterministic SGEMM, one image at a time (see conv.h).
#include "device/conv.h"

#include <algorithm>
#include <vector>

#include "device/gemm.h"

namespace simcuda {
namespace {

int64_t Crs(const ConvGeometry& g) { return g.c * g.r * g.s; }
int64_t Pq(const ConvGeometry& g) { return g.p * g.q; }

// col[crs + pq * CRS] = x[n, c, oh * stride - pad + tap * dilation, ...], 0 in the padding; crs = (c * R + r) * S
// + s. A convolution (not a cross-correlation) reads the filter mirrored: tap R-1-r for filter row r.
void Im2Col(const ConvGeometry& g, const float* x, int64_t image, float* col) {
  const int64_t crs_count = Crs(g);
  const float* xn = x + image * g.x_strides[0];
  for (int64_t oh = 0; oh < g.p; ++oh) {
    for (int64_t ow = 0; ow < g.q; ++ow) {
      float* out = col + (oh * g.q + ow) * crs_count;
      for (int64_t c = 0; c < g.c; ++c) {
        for (int64_t r = 0; r < g.r; ++r) {
          const int64_t tap_h = g.flip ? g.r - 1 - r : r;
          const int64_t ih = oh * g.stride_h - g.pad_h + tap_h * g.dil_h;
          for (int64_t s = 0; s < g.s; ++s) {
            const int64_t tap_w = g.flip ? g.s - 1 - s : s;
            const int64_t iw = ow * g.stride_w - g.pad_w + tap_w * g.dil_w;
            const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
            *out++ = inside ? xn[c * g.x_strides[1] + ih * g.x_strides[2] + iw * g.x_strides[3]] : 0.0f;
          }
        }
      }
    }
  }
}

// The inverse scatter: dx[n, c, ih, iw] += col[crs + pq * CRS] over every (pq, crs) in order.
void Col2Im(const ConvGeometry& g, const float* col, float* acc) {
  const int64_t crs_count = Crs(g);
  std::fill(acc, acc + g.c * g.h * g.w, 0.0f);
  for (int64_t oh = 0; oh < g.p; ++oh) {
    for (int64_t ow = 0; ow < g.q; ++ow) {
      const float* in = col + (oh * g.q + ow) * crs_count;
      for (int64_t c = 0; c < g.c; ++c) {
        for (int64_t r = 0; r < g.r; ++r) {
          const int64_t tap_h = g.flip ? g.r - 1 - r : r;
          const int64_t ih = oh * g.stride_h - g.pad_h + tap_h * g.dil_h;
          for (int64_t s = 0; s < g.s; ++s, ++in) {
            const int64_t tap_w = g.flip ? g.s - 1 - s : s;
            const int64_t iw = ow * g.stride_w - g.pad_w + tap_w * g.dil_w;
            if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) acc[(c * g.h + ih) * g.w + iw] += *in;
          }
        }
      }
    }
  }
}

bool PackedY(const ConvGeometry& g) {
  return g.y_strides[3] == 1 && g.y_strides[2] == g.q && g.y_strides[1] == g.p * g.q;
}

// Image `image` of a y-shaped tensor as a packed K x PQ block (column-major PQ x K): in place when it already is.
const float* PackedImage(const ConvGeometry& g, const float* t, int64_t image, std::vector<float>& scratch) {
  const float* tn = t + image * g.y_strides[0];
  if (PackedY(g)) return tn;
  scratch.resize(static_cast<size_t>(g.k * Pq(g)));
  for (int64_t k = 0; k < g.k; ++k) {
    for (int64_t oh = 0; oh < g.p; ++oh) {
      for (int64_t ow = 0; ow < g.q; ++ow) {
        scratch[static_cast<size_t>(k * Pq(g) + oh * g.q + ow)] =
            tn[k * g.y_strides[1] + oh * g.y_strides[2] + ow * g.y_strides[3]];
      }
    }
  }
  return scratch.data();
}

float Blend(float alpha, float value, float beta, float old) {
  return beta == 0.0f ? alpha * value : alpha * value + beta * old;
}

}  // namespace

int64_t ConvOutputSize(int64_t in, int64_t filter, int64_t pad, int64_t stride, int64_t dilation) {
  if (stride <= 0) return 0;
  const int64_t span = (filter - 1) * dilation + 1;
  const int64_t room = in + 2 * pad - span;
  return room < 0 ? 0 : room / stride + 1;
}

size_t ConvColumnFloats(const ConvGeometry& g) { return static_cast<size_t>(Crs(g) * Pq(g)); }

double ConvFlops(const ConvGeometry& g) {
  return 2.0 * static_cast<double>(g.n) * static_cast<double>(g.k) * static_cast<double>(Pq(g)) *
         static_cast<double>(Crs(g));
}

size_t ConvSpanBytes(const int64_t dims[4], const int64_t strides[4]) {
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    if (dims[i] <= 0) return 0;
    last += (dims[i] - 1) * strides[i];
  }
  return static_cast<size_t>(last + 1) * sizeof(float);
}

void ConvForward(const ConvGeometry& g, float alpha, const float* x, const float* w, float beta, float* y,
                 float* col) {
  const int64_t crs = Crs(g), pq = Pq(g);
  std::vector<float> out(static_cast<size_t>(pq * g.k));
  for (int64_t n = 0; n < g.n; ++n) {
    Im2Col(g, x, n, col);
    // out (PQ x K) = col^T (PQ x CRS) * filter^T (CRS x K): out[pq + k * PQ] is y[n, k, pq].
    Sgemm(true, false, pq, g.k, crs, 1.0f, col, crs, w, crs, 0.0f, out.data(), pq);
    float* yn = y + n * g.y_strides[0];
    for (int64_t k = 0; k < g.k; ++k) {
      for (int64_t oh = 0; oh < g.p; ++oh) {
        for (int64_t ow = 0; ow < g.q; ++ow) {
          float& dst = yn[k * g.y_strides[1] + oh * g.y_strides[2] + ow * g.y_strides[3]];
          dst = Blend(alpha, out[static_cast<size_t>(oh * g.q + ow + k * pq)], beta, dst);
        }
      }
    }
  }
}

void ConvBackwardData(const ConvGeometry& g, float alpha, const float* w, const float* dy, float beta, float* dx,
                      float* col) {
  const int64_t crs = Crs(g), pq = Pq(g);
  std::vector<float> scratch, acc(static_cast<size_t>(g.c * g.h * g.w));
  for (int64_t n = 0; n < g.n; ++n) {
    const float* dyn = PackedImage(g, dy, n, scratch);
    // col (CRS x PQ) = filter^T (CRS x K) * dy_n (K x PQ), then scattered back onto the input positions.
    Sgemm(false, true, crs, pq, g.k, 1.0f, w, crs, dyn, pq, 0.0f, col, crs);
    Col2Im(g, col, acc.data());
    float* dxn = dx + n * g.x_strides[0];
    for (int64_t c = 0; c < g.c; ++c) {
      for (int64_t ih = 0; ih < g.h; ++ih) {
        for (int64_t iw = 0; iw < g.w; ++iw) {
          float& dst = dxn[c * g.x_strides[1] + ih * g.x_strides[2] + iw * g.x_strides[3]];
          dst = Blend(alpha, acc[static_cast<size_t>((c * g.h + ih) * g.w + iw)], beta, dst);
        }
      }
    }
  }
}

void ConvBackwardFilter(const ConvGeometry& g, float alpha, const float* x, const float* dy, float beta, float* dw,
                        float* col) {
  const int64_t crs = Crs(g), pq = Pq(g);
  std::vector<float> scratch, acc(static_cast<size_t>(crs * g.k), 0.0f);
  for (int64_t n = 0; n < g.n; ++n) {
    Im2Col(g, x, n, col);
    const float* dyn = PackedImage(g, dy, n, scratch);
    // acc (CRS x K) += col (CRS x PQ) * dy_n^T (PQ x K): acc[crs + k * CRS] is dw[k, crs].
    Sgemm(false, false, crs, g.k, pq, 1.0f, col, crs, dyn, pq, n == 0 ? 0.0f : 1.0f, acc.data(), crs);
  }
  for (size_t i = 0; i < acc.size(); ++i) dw[i] = Blend(alpha, acc[i], beta, dw[i]);
}

}  // namespace simcuda
