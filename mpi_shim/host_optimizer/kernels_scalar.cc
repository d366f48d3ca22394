// The scalar reference kernels: one element at a time, PyTorch's operations in PyTorch's order.
// The vector kernels (kernels_simd.h) must produce the same bits; see README.md for why they can.
#include <bit>
#include <cmath>
#include <cstdint>

#include "mpi_shim/host_optimizer/bf16.h"
#include "mpi_shim/host_optimizer/kernels.h"

// The target compiles with -ffp-contract=off, so only the std::fma written here are fused. They are the ones
// PyTorch's CPU kernels fuse: add(x, alpha) is vec::fmadd(x, alpha, self), and addcmul's
// self + value * t1 * t2 is compiled to fma(value * t1, t2, self). addcdiv is self + (value * t1) / t2, in
// that order. With these, results equal torch.optim's (1.13, CPU) bit for bit (tests/hostopt/torch_compare.py).
namespace karma::hostopt {
namespace {

float FlipSign(float x, uint32_t sign) { return std::bit_cast<float>(std::bit_cast<uint32_t>(x) ^ sign); }

template <typename T>
float GradAt(const KernelTensor& t, size_t i) {
  if constexpr (sizeof(T) == 2) {
    return Bf16ToFloat(static_cast<const uint16_t*>(t.grad)[i]);
  } else {
    return static_cast<const float*>(t.grad)[i];
  }
}

// bf16 parameters are updated through their fp32 master copy; the bf16 tensor only receives the rounding.
template <typename T>
float ParamAt(const KernelTensor& t, size_t i) {
  if constexpr (sizeof(T) == 2) {
    return t.master[i];
  } else {
    return static_cast<const float*>(t.param)[i];
  }
}

template <typename T>
void SetParam(const KernelTensor& t, size_t i, float p) {
  if constexpr (sizeof(T) == 2) {
    t.master[i] = p;
    static_cast<uint16_t*>(t.param)[i] = FloatToBf16(p);
  } else {
    static_cast<float*>(t.param)[i] = p;
  }
}

// torch.optim.SGD: d = g + wd*p; buf = d on the first step, else momentum*buf + (1-dampening)*d;
// d = d + momentum*buf (Nesterov) or buf; p = p - lr*d.
template <typename T>
void Sgd(const KernelTensor& t, size_t begin, size_t end, const StepScalars& s) {
  for (size_t i = begin; i < end; ++i) {
    float p = ParamAt<T>(t, i);
    float d = FlipSign(GradAt<T>(t, i), s.grad_sign);
    if (s.use_weight_decay) d = std::fma(p, s.weight_decay, d);
    if (s.use_momentum) {
      float buf = s.momentum_first ? d : std::fma(d, s.one_minus_dampening, t.momentum_buffer[i] * s.momentum);
      t.momentum_buffer[i] = buf;
      d = s.nesterov ? std::fma(buf, s.momentum, d) : buf;
    }
    SetParam<T>(t, i, std::fma(d, s.neg_lr, p));
  }
}

// torch.optim.Adam / AdamW (amsgrad off): AdamW first scales p by 1 - lr*wd; Adam adds wd*p to the gradient.
// m = beta1*m + (1-beta1)*g; v = beta2*v + (1-beta2)*g*g; p += -step_size * m / (sqrt(v)/sqrt(bc2) + eps).
template <typename T, bool kDecoupled>
void Adam(const KernelTensor& t, size_t begin, size_t end, const StepScalars& s) {
  for (size_t i = begin; i < end; ++i) {
    float p = ParamAt<T>(t, i);
    if (kDecoupled) p = p * s.decay_factor;
    float g = FlipSign(GradAt<T>(t, i), s.grad_sign);
    if (!kDecoupled && s.use_weight_decay) g = std::fma(p, s.weight_decay, g);
    float m = std::fma(g, s.one_minus_beta1, t.exp_avg[i] * s.beta1);  // mul_, add_(alpha)
    float v = std::fma(s.one_minus_beta2 * g, g, t.exp_avg_sq[i] * s.beta2);  // mul_, addcmul_
    t.exp_avg[i] = m;
    t.exp_avg_sq[i] = v;
    float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
    SetParam<T>(t, i, p + (s.neg_step_size * m) / denom);  // addcdiv_(value = -step_size)
  }
}

constexpr KernelTable kScalar = {
    "scalar",
    {{&Sgd<float>, &Sgd<uint16_t>},
     {&Adam<float, false>, &Adam<uint16_t, false>},
     {&Adam<float, true>, &Adam<uint16_t, true>}},
};

}  // namespace

const KernelTable& ScalarKernels() { return kScalar; }

}  // namespace karma::hostopt
