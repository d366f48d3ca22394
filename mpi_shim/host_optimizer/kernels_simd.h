// The vector update kernels, written once over a vector-traits type V and instantiated per instruction set
// (kernels_avx2.cc, kernels_avx512.cc). Include only from those files: everything here has internal linkage
// so that no AVX-512 code can be shared with, or picked by the linker for, another translation unit.
//
// Each kernel performs exactly the operations of the scalar reference (kernels_scalar.cc) in the same
// order, lane by lane; add, mul, div, sqrt and fma are correctly rounded in both, so the results are the
// same bits. The target compiles with -ffp-contract=off so the compiler cannot fuse a mul and an add
// that the reference keeps separate.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mpi_shim/host_optimizer/kernels.h"

namespace karma::hostopt {
namespace {

template <class V>
struct Simd {
  using F = typename V::F;
  static constexpr size_t kW = V::kWidth;

  struct Broadcast {
    F sign, wd, neg_lr, mom, omd, b1, omb1, b2, omb2, neg_step, bc2s, eps, decay;
    explicit Broadcast(const StepScalars& s)
        : sign(V::SetBits(s.grad_sign)), wd(V::Set(s.weight_decay)), neg_lr(V::Set(s.neg_lr)),
          mom(V::Set(s.momentum)), omd(V::Set(s.one_minus_dampening)), b1(V::Set(s.beta1)),
          omb1(V::Set(s.one_minus_beta1)), b2(V::Set(s.beta2)), omb2(V::Set(s.one_minus_beta2)),
          neg_step(V::Set(s.neg_step_size)), bc2s(V::Set(s.bias_correction2_sqrt)), eps(V::Set(s.eps)),
          decay(V::Set(s.decay_factor)) {}
  };

  // One vector's worth of every array: the tensor's own memory, or zero-padded copies of its tail.
  template <typename T>
  struct Ptrs {
    T* param;
    const T* grad;
    float* m;
    float* v;
    float* buf;
    float* master;
  };

  template <typename T>
  static Ptrs<T> At(const KernelTensor& t, size_t i) {
    auto off = [i](float* p) { return p ? p + i : nullptr; };
    return {static_cast<T*>(t.param) + i, static_cast<const T*>(t.grad) + i, off(t.exp_avg),
            off(t.exp_avg_sq), off(t.momentum_buffer), off(t.master)};
  }

  template <typename T>
  static F LoadGrad(const Ptrs<T>& a, const Broadcast& b) {
    if constexpr (sizeof(T) == 2) {
      return V::Xor(V::LoadBf16(a.grad), b.sign);
    } else {
      return V::Xor(V::Load(a.grad), b.sign);
    }
  }

  template <typename T>
  static F LoadParam(const Ptrs<T>& a) {
    if constexpr (sizeof(T) == 2) {
      return V::Load(a.master);
    } else {
      return V::Load(a.param);
    }
  }

  template <typename T>
  static void StoreParam(const Ptrs<T>& a, F p) {
    if constexpr (sizeof(T) == 2) {
      V::Store(a.master, p);
      V::StoreBf16(a.param, p);
    } else {
      V::Store(a.param, p);
    }
  }

  // kMom: 0 no momentum, 1 the buffer's first step (buf = d), 2 later steps.
  template <typename T, bool kWd, int kMom, bool kNesterov>
  static void SgdVec(const Ptrs<T>& a, const Broadcast& b) {
    F p = LoadParam(a);
    F d = LoadGrad(a, b);
    if constexpr (kWd) d = V::Fma(p, b.wd, d);
    if constexpr (kMom != 0) {
      F buf = d;
      if constexpr (kMom == 2) buf = V::Fma(d, b.omd, V::Mul(V::Load(a.buf), b.mom));
      V::Store(a.buf, buf);
      d = kNesterov ? V::Fma(buf, b.mom, d) : buf;
    }
    StoreParam(a, V::Fma(d, b.neg_lr, p));
  }

  template <typename T, bool kWd, bool kDecoupled>
  static void AdamVec(const Ptrs<T>& a, const Broadcast& b) {
    F p = LoadParam(a);
    if constexpr (kDecoupled) p = V::Mul(p, b.decay);
    F g = LoadGrad(a, b);
    if constexpr (kWd) g = V::Fma(p, b.wd, g);
    F m = V::Fma(g, b.omb1, V::Mul(V::Load(a.m), b.b1));
    F v = V::Fma(V::Mul(b.omb2, g), g, V::Mul(V::Load(a.v), b.b2));
    V::Store(a.m, m);
    V::Store(a.v, v);
    F denom = V::Add(V::Div(V::Sqrt(v), b.bc2s), b.eps);
    StoreParam(a, V::Add(p, V::Div(V::Mul(b.neg_step, m), denom)));
  }

  // Software prefetch this many elements ahead in every stream, so that more lines are in flight for the four
  // to six streams of an update than the hardware prefetchers keep. On the shared development machine fp32
  // Adam at 200M parameters gained between nothing and 25 % (256 to 768 elements alike; 1024 was worse).
  static constexpr size_t kPrefetch = 512;

  template <typename T>
  static void Prefetch(const Ptrs<T>& a) {
    __builtin_prefetch(a.param + kPrefetch, 0, 3);
    __builtin_prefetch(a.grad + kPrefetch, 0, 3);
    if (a.m) __builtin_prefetch(a.m + kPrefetch, 0, 3);
    if (a.v) __builtin_prefetch(a.v + kPrefetch, 0, 3);
    if (a.buf) __builtin_prefetch(a.buf + kPrefetch, 0, 3);
    if (a.master) __builtin_prefetch(a.master + kPrefetch, 0, 3);
  }

  template <typename T>
  static void CopyIn(T* dst, const T* src, size_t n) {
    if (src)
      for (size_t i = 0; i < n; ++i) dst[i] = src[i];
  }
  template <typename T>
  static void CopyOut(T* dst, const T* src, size_t n) {
    if (dst)
      for (size_t i = 0; i < n; ++i) dst[i] = src[i];
  }

  // Whole vectors in place; the last partial vector through zero-padded copies, so that no access
  // leaves the tensor (zero lanes compute harmless values, NaN at worst, and are never stored back).
  template <typename T, class Op>
  static void Loop(const KernelTensor& t, size_t begin, size_t end, Op op) {
    size_t i = begin;
    for (; i + kW + kPrefetch <= end; i += kW) {
      const Ptrs<T> a = At<T>(t, i);
      Prefetch(a);
      op(a);
    }
    for (; i + kW <= end; i += kW) op(At<T>(t, i));
    if (i == end) return;
    const size_t n = end - i;
    const Ptrs<T> src = At<T>(t, i);
    alignas(64) T param[kW] = {};
    alignas(64) T grad[kW] = {};
    alignas(64) float m[kW] = {}, v[kW] = {}, buf[kW] = {}, master[kW] = {};
    CopyIn(param, src.param, n);
    CopyIn(grad, src.grad, n);
    CopyIn(m, src.m, n);
    CopyIn(v, src.v, n);
    CopyIn(buf, src.buf, n);
    CopyIn(master, src.master, n);
    op(Ptrs<T>{param, grad, src.m ? m : nullptr, src.v ? v : nullptr, src.buf ? buf : nullptr,
               src.master ? master : nullptr});
    CopyOut(src.param, param, n);
    CopyOut(src.m, m, n);
    CopyOut(src.v, v, n);
    CopyOut(src.buf, buf, n);
    CopyOut(src.master, master, n);
  }

  template <typename T, bool kWd, int kMom, bool kNesterov>
  static void SgdRun(const KernelTensor& t, size_t begin, size_t end, const Broadcast& b) {
    Loop<T>(t, begin, end, [&b](const Ptrs<T>& a) { SgdVec<T, kWd, kMom, kNesterov>(a, b); });
  }

  template <typename T, bool kWd>
  static void SgdMomentum(const KernelTensor& t, size_t begin, size_t end, const StepScalars& s,
                          const Broadcast& b) {
    if (!s.use_momentum) return SgdRun<T, kWd, 0, false>(t, begin, end, b);
    if (s.momentum_first) {
      return s.nesterov ? SgdRun<T, kWd, 1, true>(t, begin, end, b) : SgdRun<T, kWd, 1, false>(t, begin, end, b);
    }
    return s.nesterov ? SgdRun<T, kWd, 2, true>(t, begin, end, b) : SgdRun<T, kWd, 2, false>(t, begin, end, b);
  }

  template <typename T>
  static void Sgd(const KernelTensor& t, size_t begin, size_t end, const StepScalars& s) {
    const Broadcast b(s);
    if (s.use_weight_decay) return SgdMomentum<T, true>(t, begin, end, s, b);
    return SgdMomentum<T, false>(t, begin, end, s, b);
  }

  template <typename T, bool kDecoupled>
  static void Adam(const KernelTensor& t, size_t begin, size_t end, const StepScalars& s) {
    const Broadcast b(s);
    if (!kDecoupled && s.use_weight_decay) {
      return Loop<T>(t, begin, end, [&b](const Ptrs<T>& a) { AdamVec<T, true, kDecoupled>(a, b); });
    }
    return Loop<T>(t, begin, end, [&b](const Ptrs<T>& a) { AdamVec<T, false, kDecoupled>(a, b); });
  }

  static constexpr KernelTable Table(const char* name) {
    return {name,
            {{&Sgd<float>, &Sgd<uint16_t>},
             {&Adam<float, false>, &Adam<uint16_t, false>},
             {&Adam<float, true>, &Adam<uint16_t, true>}}};
  }
};

}  // namespace
}  // namespace karma::hostopt
