// The CPU convolutions behind simcuda's cuDNN: the definition (in double), adjointness of the three, strides,
// alpha/beta, and results that depend only on the operands' values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "device/conv.h"

namespace simcuda {
namespace {

struct Case {
  int64_t n, c, h, w, k, r, s, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w;
  bool flip;
};

// Packed NCHW strides for 4 dimensions.
void Packed(const int64_t dims[4], int64_t strides[4]) {
  strides[3] = 1;
  for (int i = 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
}

ConvGeometry Geometry(const Case& t) {
  ConvGeometry g{};
  g.n = t.n, g.c = t.c, g.h = t.h, g.w = t.w, g.k = t.k, g.r = t.r, g.s = t.s;
  g.pad_h = t.pad_h, g.pad_w = t.pad_w, g.stride_h = t.stride_h, g.stride_w = t.stride_w;
  g.dil_h = t.dil_h, g.dil_w = t.dil_w, g.flip = t.flip ? 1 : 0;
  g.p = ConvOutputSize(g.h, g.r, g.pad_h, g.stride_h, g.dil_h);
  g.q = ConvOutputSize(g.w, g.s, g.pad_w, g.stride_w, g.dil_w);
  const int64_t xd[4] = {g.n, g.c, g.h, g.w}, yd[4] = {g.n, g.k, g.p, g.q};
  Packed(xd, g.x_strides);
  Packed(yd, g.y_strides);
  return g;
}

std::vector<float> Random(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

size_t XSize(const ConvGeometry& g) { return static_cast<size_t>(g.n * g.c * g.h * g.w); }
size_t WSize(const ConvGeometry& g) { return static_cast<size_t>(g.k * g.c * g.r * g.s); }
size_t YSize(const ConvGeometry& g) { return static_cast<size_t>(g.n * g.k * g.p * g.q); }

// The definition of cuDNN's convolution (mode CUDNN_CONVOLUTION mirrors the filter), in double, packed tensors.
std::vector<double> Reference(const ConvGeometry& g, const std::vector<float>& x, const std::vector<float>& w) {
  std::vector<double> y(YSize(g), 0.0);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t k = 0; k < g.k; ++k) {
      for (int64_t p = 0; p < g.p; ++p) {
        for (int64_t q = 0; q < g.q; ++q) {
          double acc = 0;
          for (int64_t c = 0; c < g.c; ++c) {
            for (int64_t r = 0; r < g.r; ++r) {
              for (int64_t s = 0; s < g.s; ++s) {
                const int64_t ih = p * g.stride_h - g.pad_h + r * g.dil_h;
                const int64_t iw = q * g.stride_w - g.pad_w + s * g.dil_w;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                const int64_t fr = g.flip ? g.r - 1 - r : r, fs = g.flip ? g.s - 1 - s : s;
                acc += static_cast<double>(x[static_cast<size_t>(((n * g.c + c) * g.h + ih) * g.w + iw)]) *
                       static_cast<double>(w[static_cast<size_t>(((k * g.c + c) * g.r + fr) * g.s + fs)]);
              }
            }
          }
          y[static_cast<size_t>(((n * g.k + k) * g.p + p) * g.q + q)] = acc;
        }
      }
    }
  }
  return y;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

const Case kCases[] = {
    {2, 3, 7, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, false},   // "same" padding
    {2, 3, 7, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, true},    // true convolution: mirrored filter
    {1, 4, 9, 11, 2, 3, 2, 0, 1, 2, 3, 1, 1, false},  // strides, uneven filter
    {3, 2, 10, 10, 3, 3, 3, 2, 2, 1, 1, 2, 2, true},  // dilation
    {1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, false},   // 1 x 1
};

TEST(Conv, ForwardMatchesTheDefinition) {
  for (const Case& t : kCases) {
    const ConvGeometry g = Geometry(t);
    ASSERT_GT(g.p, 0);
    const auto x = Random(XSize(g), 1), w = Random(WSize(g), 2);
    std::vector<float> y(YSize(g)), col(ConvColumnFloats(g));
    ConvForward(g, 1.0f, x.data(), w.data(), 0.0f, y.data(), col.data());
    const auto want = Reference(g, x, w);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-4) << "element " << i << " flip " << t.flip;
  }
}

// <conv(x, w), dy> = <x, dx(w, dy)> = <w, dw(x, dy)>: backward data and backward filter are the adjoints of the
// forward convolution in its two arguments, which is what makes them its gradients.
TEST(Conv, BackwardPassesAreTheAdjointsOfTheForwardPass) {
  for (const Case& t : kCases) {
    const ConvGeometry g = Geometry(t);
    const auto x = Random(XSize(g), 3), w = Random(WSize(g), 4), dy = Random(YSize(g), 5);
    std::vector<float> y(YSize(g)), dx(XSize(g)), dw(WSize(g)), col(ConvColumnFloats(g));
    ConvForward(g, 1.0f, x.data(), w.data(), 0.0f, y.data(), col.data());
    ConvBackwardData(g, 1.0f, w.data(), dy.data(), 0.0f, dx.data(), col.data());
    ConvBackwardFilter(g, 1.0f, x.data(), dy.data(), 0.0f, dw.data(), col.data());
    const double forward = Dot(y, dy);
    EXPECT_NEAR(Dot(x, dx), forward, 1e-3 * (1 + std::fabs(forward))) << "flip " << t.flip;
    EXPECT_NEAR(Dot(w, dw), forward, 1e-3 * (1 + std::fabs(forward))) << "flip " << t.flip;
  }
}

TEST(Conv, AlphaScalesAndBetaAccumulatesWhileBetaZeroIgnoresTheOutput) {
  const ConvGeometry g = Geometry(kCases[0]);
  const auto x = Random(XSize(g), 6), w = Random(WSize(g), 7), old = Random(YSize(g), 8);
  std::vector<float> plain(YSize(g)), col(ConvColumnFloats(g));
  ConvForward(g, 1.0f, x.data(), w.data(), 0.0f, plain.data(), col.data());
  std::vector<float> blended = old;
  ConvForward(g, 0.5f, x.data(), w.data(), 2.0f, blended.data(), col.data());
  for (size_t i = 0; i < old.size(); ++i) ASSERT_EQ(blended[i], 0.5f * plain[i] + 2.0f * old[i]) << i;
  std::vector<float> nan(YSize(g), std::nanf(""));
  ConvForward(g, 1.0f, x.data(), w.data(), 0.0f, nan.data(), col.data());
  EXPECT_EQ(std::memcmp(nan.data(), plain.data(), plain.size() * sizeof(float)), 0);

  std::vector<float> dw(WSize(g)), dw_acc(WSize(g), 1.0f);
  ConvBackwardFilter(g, 1.0f, x.data(), old.data(), 0.0f, dw.data(), col.data());
  ConvBackwardFilter(g, 1.0f, x.data(), old.data(), 1.0f, dw_acc.data(), col.data());
  for (size_t i = 0; i < dw.size(); ++i) ASSERT_EQ(dw_acc[i], dw[i] + 1.0f) << i;
}

// Offset of element (a, b, c, d) of a 4-d tensor with the given element strides.
int64_t At(const int64_t strides[4], int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * strides[0] + b * strides[1] + c * strides[2] + d * strides[3];
}

// Copies every element of a tensor of dimensions `dims` between two layouts.
void Relayout(const int64_t dims[4], const float* from, const int64_t from_strides[4], float* to,
              const int64_t to_strides[4]) {
  for (int64_t a = 0; a < dims[0]; ++a)
    for (int64_t b = 0; b < dims[1]; ++b)
      for (int64_t c = 0; c < dims[2]; ++c)
        for (int64_t d = 0; d < dims[3]; ++d) to[At(to_strides, a, b, c, d)] = from[At(from_strides, a, b, c, d)];
}

// The same values in a padded channels-last layout give the same bits: arithmetic never depends on where the
// operands are or how they are laid out.
TEST(Conv, StridedTensorsGiveTheSameBits) {
  const ConvGeometry g = Geometry(kCases[2]);
  const auto x = Random(XSize(g), 9), w = Random(WSize(g), 10), dy = Random(YSize(g), 11);
  std::vector<float> y(YSize(g)), dx(XSize(g)), dw(WSize(g)), col(ConvColumnFloats(g));
  ConvForward(g, 1.0f, x.data(), w.data(), 0.0f, y.data(), col.data());
  ConvBackwardData(g, 1.0f, w.data(), dy.data(), 0.0f, dx.data(), col.data());
  ConvBackwardFilter(g, 1.0f, x.data(), dy.data(), 0.0f, dw.data(), col.data());

  // Channels last, with two floats of padding after every image row of channels.
  ConvGeometry h = g;
  const int64_t xrow = g.w * g.c + 2, yrow = g.q * g.k + 2;
  const int64_t xs[4] = {g.h * xrow, 1, xrow, g.c}, ys[4] = {g.p * yrow, 1, yrow, g.k};
  const int64_t xd[4] = {g.n, g.c, g.h, g.w}, yd[4] = {g.n, g.k, g.p, g.q};
  std::copy(xs, xs + 4, h.x_strides);
  std::copy(ys, ys + 4, h.y_strides);
  std::vector<float> x2(static_cast<size_t>(g.n * xs[0])), dy2(static_cast<size_t>(g.n * ys[0]));
  Relayout(xd, x.data(), g.x_strides, x2.data(), xs);
  Relayout(yd, dy.data(), g.y_strides, dy2.data(), ys);
  std::vector<float> y2(dy2.size()), dx2(x2.size()), dw2(WSize(g));
  ConvForward(h, 1.0f, x2.data(), w.data(), 0.0f, y2.data(), col.data());
  ConvBackwardData(h, 1.0f, w.data(), dy2.data(), 0.0f, dx2.data(), col.data());
  ConvBackwardFilter(h, 1.0f, x2.data(), dy2.data(), 0.0f, dw2.data(), col.data());
  std::vector<float> y_back(y.size()), dx_back(dx.size());
  Relayout(yd, y2.data(), ys, y_back.data(), g.y_strides);
  Relayout(xd, dx2.data(), xs, dx_back.data(), g.x_strides);
  EXPECT_EQ(std::memcmp(y_back.data(), y.data(), y.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(dx_back.data(), dx.data(), dx.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(dw2.data(), dw.data(), dw.size() * sizeof(float)), 0);
  EXPECT_EQ(ConvSpanBytes(xd, h.x_strides), static_cast<size_t>(At(xs, g.n - 1, g.c - 1, g.h - 1, g.w - 1) + 1) * 4);
}

TEST(Conv, SizesAndWork) {
  EXPECT_EQ(ConvOutputSize(7, 3, 1, 1, 1), 7);
  EXPECT_EQ(ConvOutputSize(9, 3, 0, 2, 1), 4);
  EXPECT_EQ(ConvOutputSize(10, 3, 2, 1, 2), 10);
  EXPECT_EQ(ConvOutputSize(2, 5, 0, 1, 1), 0);  // the filter does not fit
  const ConvGeometry g = Geometry(kCases[0]);
  EXPECT_EQ(ConvColumnFloats(g), static_cast<size_t>(3 * 3 * 3 * 7 * 6));
  EXPECT_DOUBLE_EQ(ConvFlops(g), 2.0 * 2 * 5 * (7 * 6) * (3 * 3 * 3));
}

}  // namespace
}  // namespace simcuda
