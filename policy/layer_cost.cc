// Op-name classification and the per-layer FLOP formulas of the cost model.
#include "policy/layer_cost.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace karma::policy {
namespace {

constexpr const char* kKindNames[] = {
    "unknown",     "convolution", "convolution_backward", "gemm",     "batch_norm",
    "batch_norm_backward", "layer_norm", "layer_norm_backward", "activation", "activation_backward",
    "pooling",     "pooling_backward", "softmax", "softmax_backward", "lstm", "attention", "dropout",
    "elementwise", "reduction", "embedding", "alias", "allocation"};
static_assert(std::size(kKindNames) == kLayerKindCount);

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool Has(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

template <size_t N>
bool HasAny(const std::string& s, const std::string_view (&parts)[N]) {
  return std::any_of(std::begin(parts), std::end(parts), [&](std::string_view p) { return Has(s, p); });
}

// The op's own name without a namespace ("aten::relu_" -> "relu_").
std::string_view Base(std::string_view name) {
  const size_t colon = name.rfind("::");
  return colon == std::string_view::npos ? name : name.substr(colon + 2);
}

// aten operators that only create a view of existing storage (no kernel, no data produced).
constexpr std::string_view kAtenAliases[] = {
    "detach", "detach_", "view", "_reshape_alias", "reshape", "t", "transpose", "expand", "unsqueeze",
    "squeeze", "_unsafe_view", "split", "split_with_sizes", "alias", "as_strided", "permute", "select",
    "slice", "narrow", "lift_fresh", "view_as", "unfold", "chunk", "unbind", "diagonal", "expand_as",
    "flatten", "unflatten", "_local_scalar_dense", "_record_function_enter", "_record_function_enter_new",
    "contiguous", "numpy_t", "mt"};
constexpr std::string_view kAtenAllocations[] = {"empty", "empty_like", "empty_strided", "new_empty",
                                                 "new_empty_strided", "zeros", "zeros_like", "ones",
                                                 "ones_like", "full", "full_like", "new_zeros", "new_ones",
                                                 "scalar_tensor", "arange"};

LayerKind ClassifyAten(std::string_view op) {
  std::string base(op);
  while (!base.empty() && base.back() == '_' && base != "t_") base.pop_back();  // in-place: relu_ -> relu
  if (std::find(std::begin(kAtenAliases), std::end(kAtenAliases), op) != std::end(kAtenAliases) ||
      std::find(std::begin(kAtenAliases), std::end(kAtenAliases), base) != std::end(kAtenAliases)) {
    return LayerKind::kAlias;
  }
  if (std::find(std::begin(kAtenAllocations), std::end(kAtenAllocations), base) != std::end(kAtenAllocations)) {
    return LayerKind::kAllocation;
  }
  const std::string s = Lower(base);
  const bool backward = Has(s, "backward");
  if (Has(s, "conv")) return backward ? LayerKind::kConvolutionBackward : LayerKind::kConvolution;
  if (Has(s, "batch_norm")) return backward ? LayerKind::kBatchNormBackward : LayerKind::kBatchNorm;
  if (Has(s, "layer_norm") || Has(s, "group_norm")) {
    return backward ? LayerKind::kLayerNormBackward : LayerKind::kLayerNorm;
  }
  if (Has(s, "attention") || Has(s, "_efficient_attention") || Has(s, "_flash")) return LayerKind::kAttention;
  if (Has(s, "lstm") || Has(s, "gru") || Has(s, "rnn")) return LayerKind::kLstm;
  if (Has(s, "softmax")) return backward ? LayerKind::kSoftmaxBackward : LayerKind::kSoftmax;
  if (Has(s, "pool")) return backward ? LayerKind::kPoolingBackward : LayerKind::kPooling;
  if (Has(s, "dropout") || s == "bernoulli") return LayerKind::kDropout;
  if (Has(s, "embedding")) return LayerKind::kEmbedding;
  constexpr std::string_view kGemm[] = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm", "addmv",
                                        "mv", "dot", "einsum"};
  if (std::find(std::begin(kGemm), std::end(kGemm), s) != std::end(kGemm)) return LayerKind::kGemm;
  if (s == "threshold_backward" || Has(s, "relu_backward") || Has(s, "gelu_backward") ||
      Has(s, "tanh_backward") || Has(s, "sigmoid_backward") || Has(s, "silu_backward")) {
    return LayerKind::kActivationBackward;
  }
  constexpr std::string_view kAct[] = {"relu", "gelu", "tanh", "sigmoid", "silu", "threshold", "hardtanh",
                                       "leaky_relu", "elu", "softplus"};
  if (std::find(std::begin(kAct), std::end(kAct), s) != std::end(kAct)) return LayerKind::kActivation;
  constexpr std::string_view kReduce[] = {"sum", "mean", "norm", "amax", "max", "min", "var", "std", "prod"};
  if (std::find(std::begin(kReduce), std::end(kReduce), s) != std::end(kReduce)) return LayerKind::kReduction;
  return LayerKind::kElementwise;  // add, mul, div, copy, cat, clone, triu, addcdiv, sqrt, ...
}

// cuDNN / cuBLAS API calls and CUDA kernel names, as a recorded trace names them.
LayerKind ClassifyNative(const std::string& s) {
  const bool backward = Has(s, "backward") || Has(s, "bwd") || Has(s, "dgrad") || Has(s, "wgrad") ||
                        Has(s, "_bw_") || Has(s, "backprop");
  constexpr std::string_view kConv[] = {"convolution", "conv2d", "conv3d", "implicit_convolve", "fprop_implicit",
                                        "implicit_gemm", "winograd", "fft2d", "cudnnconvolution", "xmma_fprop",
                                        "conv_kernel", "convolve"};
  if (HasAny(s, kConv)) return backward ? LayerKind::kConvolutionBackward : LayerKind::kConvolution;
  if (Has(s, "batchnorm") || Has(s, "batch_norm") || Has(s, "bn_fw") || Has(s, "bn_bw")) {
    return backward ? LayerKind::kBatchNormBackward : LayerKind::kBatchNorm;
  }
  if (Has(s, "layernorm") || Has(s, "layer_norm")) {
    return backward ? LayerKind::kLayerNormBackward : LayerKind::kLayerNorm;
  }
  if (Has(s, "multiheadattn") || Has(s, "fmha") || Has(s, "flash_fwd") || Has(s, "flash_bwd") ||
      Has(s, "attention")) {
    return LayerKind::kAttention;
  }
  if (Has(s, "rnn") || Has(s, "lstm") || Has(s, "gru")) return LayerKind::kLstm;
  if (Has(s, "softmax")) return backward ? LayerKind::kSoftmaxBackward : LayerKind::kSoftmax;
  if (Has(s, "pool")) return backward ? LayerKind::kPoolingBackward : LayerKind::kPooling;
  if (Has(s, "dropout")) return LayerKind::kDropout;
  constexpr std::string_view kGemm[] = {"gemm", "cublassgemm", "cublasgemm", "cublaslt", "matmul", "sgemm",
                                        "hgemm", "cutlass"};
  if (HasAny(s, kGemm)) return LayerKind::kGemm;
  if (Has(s, "activation") || Has(s, "relu") || Has(s, "threshold") || Has(s, "gelu")) {
    return backward ? LayerKind::kActivationBackward : LayerKind::kActivation;
  }
  if (Has(s, "reduce_kernel") || Has(s, "reduction")) return LayerKind::kReduction;
  if (Has(s, "embedding") || Has(s, "index_select") || Has(s, "indexselect")) return LayerKind::kEmbedding;
  if (Has(s, "elementwise") || Has(s, "vectorized") || Has(s, "unrolled") || Has(s, "memcpy") ||
      Has(s, "fill_kernel") || Has(s, "copy")) {
    return LayerKind::kElementwise;
  }
  return LayerKind::kUnknown;
}

// Element counts of the op's inputs and outputs, largest first.
struct Sizes {
  std::vector<uint64_t> in, out;
};
Sizes SizesOf(const trace::Op& op, const trace::Iteration& it) {
  Sizes s;
  for (trace::BufferId b : op.reads) s.in.push_back(it.buffers[b].Elements());
  for (trace::BufferId b : op.touches) s.in.push_back(it.buffers[b].Elements());
  for (trace::BufferId b : op.writes) s.out.push_back(it.buffers[b].Elements());
  std::sort(s.in.rbegin(), s.in.rend());
  std::sort(s.out.rbegin(), s.out.rend());
  return s;
}

uint64_t SqrtProduct(double a, double b, double c) { return static_cast<uint64_t>(std::sqrt(a * b * c) + 0.5); }

}  // namespace

const char* Name(LayerKind k) {
  const size_t i = static_cast<size_t>(k);
  return i < std::size(kKindNames) ? kKindNames[i] : "invalid";
}

LayerKind ClassifyOpName(std::string_view name) {
  if (name.substr(0, 6) == "aten::") return ClassifyAten(Base(name));
  return ClassifyNative(Lower(name));
}

bool IsComputeIntensive(LayerKind k) {
  return k == LayerKind::kConvolution || k == LayerKind::kGemm || k == LayerKind::kLstm ||
         k == LayerKind::kAttention;
}

uint64_t ConvFlops(const ConvShape& s) { return 2 * s.n * s.k * s.c * s.r * s.s * s.p * s.q; }
uint64_t GemmFlops(uint64_t m, uint64_t n, uint64_t k) { return 2 * m * n * k; }
uint64_t ElementwiseFlops(uint64_t elements, uint64_t per_element) { return elements * per_element; }
uint64_t PoolingFlops(uint64_t output_elements, uint64_t r, uint64_t s) { return output_elements * r * s; }

uint64_t LstmFlops(uint64_t batch, uint64_t steps, uint64_t input, uint64_t hidden) {
  const uint64_t gates = 4 * GemmFlops(batch, hidden, input + hidden);
  const uint64_t pointwise = ElementwiseFlops(batch * hidden, 10);
  return steps * (gates + pointwise);
}

uint64_t SelfAttentionFlops(uint64_t batch, uint64_t seq, uint64_t model_dim, uint64_t heads) {
  const uint64_t projections = 4 * GemmFlops(batch * seq, model_dim, model_dim);
  const uint64_t scores_and_sum = 2 * GemmFlops(batch * seq, seq, model_dim);
  const uint64_t softmax = ElementwiseFlops(batch * heads * seq * seq, kSoftmaxForwardPerElement);
  return projections + scores_and_sum + softmax;
}

uint64_t EstimateFlops(const trace::Op& op, const trace::Iteration& it) {
  const LayerKind kind = ClassifyOpName(op.name);
  const Sizes z = SizesOf(op, it);
  const uint64_t out = z.out.empty() ? (z.in.empty() ? 0 : z.in[0]) : z.out[0];
  const uint64_t in = z.in.empty() ? out : z.in[0];
  switch (kind) {
    case LayerKind::kGemm:
      // The two largest operands and the result: |A|·|B|·|C| = (m·n·k)².
      if (z.in.size() >= 2 && !z.out.empty()) return 2 * SqrtProduct(z.in[0], z.in[1], z.out[0]);
      return 0;
    case LayerKind::kConvolution:
    case LayerKind::kConvolutionBackward: {
      // Forward: input, weight -> output. Backward: grad-output, input, weight -> grad-input, grad-weight,
      // i.e. both the data and the filter gradient (two convolutions' worth).
      if (z.in.size() < 2) return 0;
      const double filter = 9;  // R·S of a 3×3 convolution
      if (kind == LayerKind::kConvolution) {
        return 2 * SqrtProduct(z.in[0], z.in[1], static_cast<double>(out) * filter);
      }
      if (z.in.size() < 3) return 0;
      return 4 * SqrtProduct(z.in[0], z.in[1], static_cast<double>(z.in[2]) * filter);
    }
    case LayerKind::kBatchNorm:
    case LayerKind::kLayerNorm:
      return ElementwiseFlops(out, kNormForwardPerElement);
    case LayerKind::kBatchNormBackward:
    case LayerKind::kLayerNormBackward:
      return ElementwiseFlops(out, kNormBackwardPerElement);
    case LayerKind::kSoftmax: return ElementwiseFlops(out, kSoftmaxForwardPerElement);
    case LayerKind::kSoftmaxBackward: return ElementwiseFlops(out, kSoftmaxBackwardPerElement);
    case LayerKind::kPooling: return PoolingFlops(in, 1, 1);  // every input element is compared or summed once
    case LayerKind::kPoolingBackward: return ElementwiseFlops(out, 1);
    case LayerKind::kDropout: return ElementwiseFlops(out, 2);
    case LayerKind::kActivation:
    case LayerKind::kActivationBackward:
    case LayerKind::kElementwise:
    case LayerKind::kEmbedding:
      return ElementwiseFlops(out, 1);
    case LayerKind::kReduction: return ElementwiseFlops(in, 1);
    case LayerKind::kLstm:
    case LayerKind::kAttention:
      // Sizes alone do not give the sequence length or the head count: the operands' product bound of a GEMM
      // over the two largest inputs and the output is the best shape-free estimate.
      if (z.in.size() >= 2 && !z.out.empty()) return 2 * SqrtProduct(z.in[0], z.in[1], z.out[0]);
      return 0;
    case LayerKind::kAlias:
    case LayerKind::kAllocation:
    case LayerKind::kUnknown:
      return 0;
  }
  return 0;
}

}  // namespace karma::policy
