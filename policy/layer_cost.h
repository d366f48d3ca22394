// Layer kinds recognized from op names (aten, cuDNN, cuBLAS, kernel names) and the per-layer FLOP formulas.
#pragma once

#include <cstdint>
#include <string_view>

#include "ground/trace/model.h"

namespace karma::policy {

enum class LayerKind : uint8_t {
  kUnknown = 0,
  kConvolution,
  kConvolutionBackward,
  kGemm,            // fully connected, matmul, bmm
  kBatchNorm,
  kBatchNormBackward,
  kLayerNorm,
  kLayerNormBackward,
  kActivation,      // ReLU, GELU, tanh, sigmoid
  kActivationBackward,
  kPooling,
  kPoolingBackward,
  kSoftmax,
  kSoftmaxBackward,
  kLstm,
  kAttention,
  kDropout,
  kElementwise,     // add, mul, div, copy, optimizer updates
  kReduction,       // sum, mean
  kEmbedding,
  kAlias,           // a view of existing storage: no data is produced (detach, view, t, transpose, ...)
  kAllocation,      // empty, zeros, new_empty_strided: storage without (or with constant) contents
};
inline constexpr int kLayerKindCount = 22;

const char* Name(LayerKind k);
// The kind of an op from its name: aten::*, cudnn*/cublas* calls, or a kernel's (possibly mangled) name.
LayerKind ClassifyOpName(std::string_view name);
// Heavy layers whose outputs the baselines treat as checkpoints / offload targets (vDNN's and SuperNeurons'
// "CONV layers"; for transformers the matrix products play that role).
bool IsComputeIntensive(LayerKind k);

// The per-layer formulas. Multiply-adds count as 2 FLOPs; element-wise work counts per element.
struct ConvShape {
  uint64_t n, c, h, w;  // input: batch, channels, height, width
  uint64_t k, r, s;     // filters and filter height, width
  uint64_t p, q;        // output height, width
};
// Forward, backward-data and backward-filter each cost 2·N·K·C·R·S·P·Q.
uint64_t ConvFlops(const ConvShape& s);
// Fully connected / GEMM: C[m,n] = A[m,k]·B[k,n] (+ bias): 2·m·n·k.
uint64_t GemmFlops(uint64_t m, uint64_t n, uint64_t k);
// Element-wise layers (ReLU, add, dropout mask, ...): `per_element` operations per element.
uint64_t ElementwiseFlops(uint64_t elements, uint64_t per_element);
// Batch/layer normalization, training mode: mean (1), variance (2), normalize (2), scale and shift (2) per
// element forward; the backward pass costs about twice the forward.
inline constexpr uint64_t kNormForwardPerElement = 7;
inline constexpr uint64_t kNormBackwardPerElement = 14;
// Softmax: max, subtract, exp, sum, divide per element; backward: product, sum, subtract, multiply.
inline constexpr uint64_t kSoftmaxForwardPerElement = 5;
inline constexpr uint64_t kSoftmaxBackwardPerElement = 4;
// Pooling over an r×s window: one comparison or addition per window element per output element.
uint64_t PoolingFlops(uint64_t output_elements, uint64_t r, uint64_t s);
// One LSTM layer over `steps` time steps: four gates of 2·H·(I+H) per sample as GEMMs, plus about ten
// element-wise operations per hidden unit (gate nonlinearities, cell and hidden state updates).
uint64_t LstmFlops(uint64_t batch, uint64_t steps, uint64_t input, uint64_t hidden);
// Multi-head self-attention over a sequence: Q, K, V and output projections (8·B·S·D²), scores and the
// weighted sum (4·B·S²·D) and the softmax (5·B·H·S²).
uint64_t SelfAttentionFlops(uint64_t batch, uint64_t seq, uint64_t model_dim, uint64_t heads);

// FLOPs of a recorded op whose count is missing, inferred from its kind and the sizes of the buffers it
// touches (shapes are not recorded). GEMMs are exact (m·n·k = sqrt(|A|·|B|·|C|)); convolutions assume a 3×3
// filter and equal input and output extents; element-wise kinds use the output element count. Returns 0
// for kinds that do no arithmetic (views, allocations) or that are not recognized.
uint64_t EstimateFlops(const trace::Op& op, const trace::Iteration& it);

}  // namespace karma::policy
