// The AVX-512 instantiation of the vector kernels (16 fp32 lanes); compiled with -mavx512f/bw/vl/dq.
// GCC 12's AVX-512 intrinsics seed their results with _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports at every use (GCC bug 105593, fixed in GCC 13); the values are fully defined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "mpi_shim/host_optimizer/kernels_simd.h"

namespace karma::hostopt {
namespace {

struct V512 {
  using F = __m512;
  static constexpr size_t kWidth = 16;

  static F Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static F LoadBf16(const uint16_t* p) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  // Round to nearest even with integer arithmetic, NaN -> 0x7FC0, like FloatToBf16. (vcvtneps2bf16 would
  // flush denormals to zero, so it would not match the reference.)
  static void StoreBf16(uint16_t* p, F x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, _mm512_set1_epi32(0x7FC0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  }
  static F Set(float x) { return _mm512_set1_ps(x); }
  static F SetBits(uint32_t bits) { return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(bits))); }
  static F Add(F a, F b) { return _mm512_add_ps(a, b); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Div(F a, F b) { return _mm512_div_ps(a, b); }
  static F Sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F Xor(F a, F b) {
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  }
};

constexpr KernelTable kAvx512 = Simd<V512>::Table("avx512");

}  // namespace

const KernelTable& Avx512Kernels() { return kAvx512; }

}  // namespace karma::hostopt
