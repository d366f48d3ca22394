// STREAM triad kernels: a plain loop (ordinary stores), and non-temporal stores with software prefetch
// (AVX-512 where the CPU has it, SSE2 otherwise).
#include "bench/host_optimizer/triad.h"

#include <immintrin.h>

#include <algorithm>

#include "mpi_shim/host_optimizer/host_optimizer.h"

namespace karma::bench {
namespace {

// As far ahead as the optimizer kernels prefetch (kernels_simd.h), in bytes: 512 floats.
constexpr size_t kPrefetchDoubles = 256;

struct Share {
  size_t begin, end;
};

Share ShareOf(size_t n, int worker, int workers) {
  const size_t chunks = (n + 7) / 8;
  const size_t w = static_cast<size_t>(worker), ws = static_cast<size_t>(workers);
  return {std::min(n, chunks * w / ws * 8), std::min(n, chunks * (w + 1) / ws * 8)};
}

void TriadPlain(double* __restrict a, const double* __restrict b, const double* __restrict c, size_t begin,
                size_t end, double s) {
  for (size_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
}

// Shares start on multiples of 8 doubles of 2 MiB-aligned arrays, so every vector store is aligned.
void TriadStreamingSse2(double* a, const double* b, const double* c, size_t begin, size_t end, double s) {
  const __m128d sv = _mm_set1_pd(s);
  size_t i = begin;
  for (; i + 8 + kPrefetchDoubles <= end; i += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(b + i + kPrefetchDoubles), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i + kPrefetchDoubles), _MM_HINT_T0);
    for (size_t k = 0; k < 8; k += 2) {
      _mm_stream_pd(a + i + k, _mm_add_pd(_mm_load_pd(b + i + k), _mm_mul_pd(sv, _mm_load_pd(c + i + k))));
    }
  }
  for (; i < end; ++i) a[i] = b[i] + s * c[i];
}

__attribute__((target("avx512f"))) void TriadStreamingAvx512(double* a, const double* b, const double* c,
                                                             size_t begin, size_t end, double s) {
  const __m512d sv = _mm512_set1_pd(s);
  size_t i = begin;
  for (; i + 8 + kPrefetchDoubles <= end; i += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(b + i + kPrefetchDoubles), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i + kPrefetchDoubles), _MM_HINT_T0);
    _mm512_stream_pd(a + i, _mm512_add_pd(_mm512_load_pd(b + i), _mm512_mul_pd(sv, _mm512_load_pd(c + i))));
  }
  for (; i < end; ++i) a[i] = b[i] + s * c[i];
}

}  // namespace

const char* TriadStreamingName() { return hostopt::IsaSupported(hostopt::Isa::kAvx512) ? "stream512" : "stream128"; }

void Triad(hostopt::ThreadPool& pool, double* a, const double* b, const double* c, size_t n, double s,
           bool streaming) {
  const int workers = pool.size();
  const bool avx512 = hostopt::IsaSupported(hostopt::Isa::kAvx512);
  pool.Run([&](int w) {
    const Share sh = ShareOf(n, w, workers);
    if (!streaming) {
      TriadPlain(a, b, c, sh.begin, sh.end, s);
      return;
    }
    if (avx512) {
      TriadStreamingAvx512(a, b, c, sh.begin, sh.end, s);
    } else {
      TriadStreamingSse2(a, b, c, sh.begin, sh.end, s);
    }
    _mm_sfence();  // the streamed lines are globally visible before the job counts as done
  });
}

void FillParallel(hostopt::ThreadPool& pool, double* x, size_t n, double value) {
  const int workers = pool.size();
  pool.Run([&](int w) {
    const Share sh = ShareOf(n, w, workers);
    std::fill(x + sh.begin, x + sh.end, value);
  });
}

}  // namespace karma::bench
