// A deterministic single-precision GEMM on the CPU: the arithmetic behind the simulated cuBLAS.
#pragma once

#include <cstdint>

namespace simcuda {

// C = alpha * op(A) * op(B) + beta * C, column-major as in BLAS; op(X) is X or its transpose. op(A) is m x k,
// op(B) k x n. Every element's dot product is summed in order p = 0 .. k-1 in float, then scaled: the result
// does not depend on addresses, alignment, blocking or vector width, so it is the same bit for bit wherever the
// operands live. beta == 0 ignores C's contents (NaN included), as BLAS does.
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace simcuda
