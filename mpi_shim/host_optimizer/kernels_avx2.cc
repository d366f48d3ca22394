// The AVX2 instantiation of the vector kernels (8 fp32 lanes); compiled with -mavx2 -mfma.
#include <immintrin.h>

#include "mpi_shim/host_optimizer/kernels_simd.h"

namespace karma::hostopt {
namespace {

struct V256 {
  using F = __m256;
  static constexpr size_t kWidth = 8;

  static F Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F LoadBf16(const uint16_t* p) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  // Round to nearest even with integer arithmetic, NaN -> 0x7FC0, like FloatToBf16.
  static void StoreBf16(uint16_t* p, F x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
    // Every lane is below 0x10000, so the unsigned saturating pack is exact.
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  }
  static F Set(float x) { return _mm256_set1_ps(x); }
  static F SetBits(uint32_t bits) { return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(bits))); }
  static F Add(F a, F b) { return _mm256_add_ps(a, b); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Div(F a, F b) { return _mm256_div_ps(a, b); }
  static F Sqrt(F a) { return _mm256_sqrt_ps(a); }
  static F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F Xor(F a, F b) { return _mm256_xor_ps(a, b); }
};

constexpr KernelTable kAvx2 = Simd<V256>::Table("avx2");

}  // namespace

const KernelTable& Avx2Kernels() { return kAvx2; }

}  // namespace karma::hostopt
