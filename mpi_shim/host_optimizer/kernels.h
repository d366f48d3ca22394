// The per-block update kernels of the host optimizer: their arguments, and one table per instruction set.
// This header is included by the ISA-specific translation units (compiled with -mavx2 / -mavx512*), so it
// holds only plain structs and declarations: an inline function here could be emitted with AVX-512
// encodings and picked by the linker for every caller.
#pragma once

#include <cstddef>
#include <cstdint>

namespace karma::hostopt {

// One tensor's arrays, each at element 0. `param` and `grad` are float or bf16 (uint16_t) by the kernel's
// dtype; the state arrays are always fp32 and null where the algorithm has no use for them.
struct KernelTensor {
  void* param = nullptr;
  const void* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  float* momentum_buffer = nullptr;
  float* master = nullptr;  // bf16 parameters: the fp32 copy the update is applied to
};

// The scalars of one step of one tensor, rounded to fp32 the way PyTorch hands Python floats to an fp32
// kernel: computed in double, then converted once.
struct StepScalars {
  uint32_t grad_sign = 0;           // 0x80000000 when maximizing: the gradient's sign bit is flipped
  float weight_decay = 0;           // SGD and Adam: added to the gradient as wd * param
  bool use_weight_decay = false;    // PyTorch skips the add entirely when weight_decay == 0
  float neg_lr = 0;                 // SGD: param += neg_lr * d
  float momentum = 0;               // SGD
  float one_minus_dampening = 1;    // SGD
  bool use_momentum = false;
  bool momentum_first = false;      // the buffer does not exist yet: buf = d (no dampening)
  bool nesterov = false;
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;  // Adam, AdamW
  float neg_step_size = 0;          // -lr / (1 - beta1^t)
  float bias_correction2_sqrt = 1;  // sqrt(1 - beta2^t)
  float eps = 0;
  float decay_factor = 1;           // AdamW: param *= 1 - lr * weight_decay
};

enum class KernelAlgo { kSgd = 0, kAdam = 1, kAdamW = 2, kCount = 3 };
enum class KernelDType { kF32 = 0, kBF16 = 1, kCount = 2 };

// Updates elements [begin, end) of one tensor.
using KernelFn = void (*)(const KernelTensor& t, size_t begin, size_t end, const StepScalars& s);

struct KernelTable {
  const char* name;
  KernelFn fn[static_cast<int>(KernelAlgo::kCount)][static_cast<int>(KernelDType::kCount)];
};

// The scalar reference: one element at a time, PyTorch's operations in PyTorch's order.
const KernelTable& ScalarKernels();
// Defined only when the compiler can target the instruction set; call only when the CPU has it.
const KernelTable& Avx2Kernels();
const KernelTable& Avx512Kernels();

}  // namespace karma::hostopt
