// The CPU SGEMM: BLAS semantics, and bit-identical results wherever the operands live.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "device/gemm.h"

namespace simcuda {
namespace {

// The definition: each element summed over p in order, then scaled. The blocked kernel must match it exactly.
void Reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += (ta ? a[p + i * lda] : a[i + p * lda]) * (tb ? b[j + p * ldb] : b[p + j * ldb]);
      c[i + j * ldc] = beta == 0 ? alpha * acc : alpha * acc + beta * c[i + j * ldc];
    }
  }
}

std::vector<float> Random(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

TEST(Sgemm, MatchesTheDefinitionBitForBit) {
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      for (auto [m, n, k] : {std::tuple{37, 13, 70}, {64, 64, 64}, {16, 4, 1}, {5, 3, 0}, {100, 9, 33}}) {
        const int64_t lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 1, ldc = m + 2;
        auto a = Random(static_cast<size_t>(lda * (ta ? m : k) + 1), 1);
        auto b = Random(static_cast<size_t>(ldb * (tb ? k : n) + 1), 2);
        auto c0 = Random(static_cast<size_t>(ldc * n), 3);
        auto want = c0, got = c0;
        Reference(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, want.data(), ldc);
        Sgemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, got.data(), ldc);
        ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
            << "ta " << ta << " tb " << tb << " m " << m << " n " << n << " k " << k;
      }
    }
  }
}

TEST(Sgemm, BetaZeroIgnoresWhatCHolds) {
  const int m = 20, n = 7, k = 5;
  auto a = Random(m * k, 4), b = Random(k * n, 5);
  std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
  Sgemm(false, false, m, n, k, 1, a.data(), m, b.data(), k, 0, c.data(), m);
  for (float x : c) ASSERT_FALSE(std::isnan(x));
}

TEST(Sgemm, ResultsDoNotDependOnAlignment) {
  const int m = 67, n = 29, k = 131;
  auto a = Random(m * k, 6), b = Random(k * n, 7);
  std::vector<float> first(m * n);
  Sgemm(false, true, m, n, k, 1, a.data(), m, b.data(), n, 0, first.data(), m);
  for (int shift = 1; shift < 8; ++shift) {
    std::vector<float> a2(a.size() + shift), b2(b.size() + 8), c2(first.size() + shift);
    std::copy(a.begin(), a.end(), a2.begin() + shift);
    std::copy(b.begin(), b.end(), b2.begin() + 8 - shift);
    Sgemm(false, true, m, n, k, 1, a2.data() + shift, m, b2.data() + 8 - shift, n, 0, c2.data() + shift, m);
    ASSERT_EQ(std::memcmp(first.data(), c2.data() + shift, first.size() * sizeof(float)), 0) << shift;
  }
}

}  // namespace
}  // namespace simcuda
