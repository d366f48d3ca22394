// Blocked SGEMM with a fixed summation order per element (see gemm.h).
#include "device/gemm.h"

#include <algorithm>
#include <vector>

namespace simcuda {
namespace {

constexpr int64_t kMr = 16;  // rows of C per micro-tile (the vectorized dimension)
constexpr int64_t kNr = 4;   // columns of C per micro-tile

// acc[j][i] = sum_p ap[p * lda_p + i] * bp[j][p], p ascending. `rows` <= kMr, `cols` <= kNr.
// GCC vectorizes the i loops; the AVX2 clone only widens them, so both produce identical sums.
__attribute__((target_clones("avx2", "default"))) void MicroTile(const float* __restrict ap, int64_t lda_p,
                                                                   const float* const* bp, int64_t k,
                                                                   int64_t rows, int64_t cols,
                                                                   float (*__restrict acc)[kMr]) {
  float t[kNr][kMr] = {};  // local, so the compiler keeps it in registers
  if (rows == kMr && cols == kNr) {
    const float* __restrict b0 = bp[0];
    const float* __restrict b1 = bp[1];
    const float* __restrict b2 = bp[2];
    const float* __restrict b3 = bp[3];
    for (int64_t p = 0; p < k; ++p) {
      const float* __restrict a = ap + p * lda_p;
      const float v0 = b0[p], v1 = b1[p], v2 = b2[p], v3 = b3[p];
      for (int64_t i = 0; i < kMr; ++i) {
        t[0][i] += a[i] * v0;
        t[1][i] += a[i] * v1;
        t[2][i] += a[i] * v2;
        t[3][i] += a[i] * v3;
      }
    }
  } else {
    for (int64_t p = 0; p < k; ++p) {
      const float* __restrict a = ap + p * lda_p;
      for (int64_t j = 0; j < cols; ++j) {
        const float v = bp[j][p];
        for (int64_t i = 0; i < rows; ++i) t[j][i] += a[i] * v;
      }
    }
  }
  for (int64_t j = 0; j < kNr; ++j) {
    for (int64_t i = 0; i < kMr; ++i) acc[j][i] = t[j][i];
  }
}

}  // namespace

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  // op(A) packed column-major (m x k, leading dimension m): column p is contiguous over the rows of C.
  std::vector<float> ap(static_cast<size_t>(k > 0 ? m * k : 1));
  for (int64_t p = 0; p < k; ++p) {
    for (int64_t i = 0; i < m; ++i) ap[p * m + i] = trans_a ? a[p + i * lda] : a[i + p * lda];
  }
  // kNr columns of op(B) at a time, each packed contiguous over p.
  std::vector<float> bpack(static_cast<size_t>(kNr * std::max<int64_t>(k, 1)));
  float acc[kNr][kMr];
  for (int64_t j0 = 0; j0 < n; j0 += kNr) {
    const int64_t cols = std::min(kNr, n - j0);
    const float* bp[kNr];
    for (int64_t j = 0; j < kNr; ++j) {
      float* col = bpack.data() + j * std::max<int64_t>(k, 1);
      const int64_t jj = j0 + std::min(j, cols - 1);
      for (int64_t p = 0; p < k; ++p) col[p] = trans_b ? b[jj + p * ldb] : b[p + jj * ldb];
      bp[j] = col;
    }
    for (int64_t i0 = 0; i0 < m; i0 += kMr) {
      const int64_t rows = std::min(kMr, m - i0);
      MicroTile(ap.data() + i0, m, bp, k, rows, cols, acc);
      for (int64_t j = 0; j < cols; ++j) {
        float* cc = c + i0 + (j0 + j) * ldc;
        for (int64_t i = 0; i < rows; ++i) {
          cc[i] = beta == 0.0f ? alpha * acc[j][i] : alpha * acc[j][i] + beta * cc[i];
        }
      }
    }
  }
}

}  // namespace simcuda
