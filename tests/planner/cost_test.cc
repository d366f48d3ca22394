// Layer kinds from op names, the per-layer FLOP formulas, estimates from buffer sizes, and the access model.
#include <gtest/gtest.h>

#include <cmath>

#include "policy/access.h"
#include "policy/cost_model.h"
#include "policy/layer_cost.h"
#include "tests/planner/planner_test_util.h"

namespace karma::policy {
namespace {

TEST(LayerCost, RecognizesAtenCudnnCublasAndKernelNames) {
  const std::pair<const char*, LayerKind> cases[] = {
      {"aten::convolution", LayerKind::kConvolution},
      {"aten::convolution_backward", LayerKind::kConvolutionBackward},
      {"aten::cudnn_convolution", LayerKind::kConvolution},
      {"aten::native_batch_norm", LayerKind::kBatchNorm},
      {"aten::native_batch_norm_backward", LayerKind::kBatchNormBackward},
      {"aten::relu_", LayerKind::kActivation},
      {"aten::gelu", LayerKind::kActivation},
      {"aten::threshold_backward", LayerKind::kActivationBackward},
      {"aten::max_pool2d_with_indices", LayerKind::kPooling},
      {"aten::max_pool2d_with_indices_backward", LayerKind::kPoolingBackward},
      {"aten::_softmax", LayerKind::kSoftmax},
      {"aten::_softmax_backward_data", LayerKind::kSoftmaxBackward},
      {"aten::addmm", LayerKind::kGemm},
      {"aten::bmm", LayerKind::kGemm},
      {"aten::native_layer_norm", LayerKind::kLayerNorm},
      {"aten::lstm", LayerKind::kLstm},
      {"aten::_scaled_dot_product_efficient_attention", LayerKind::kAttention},
      {"aten::bernoulli_", LayerKind::kDropout},
      {"aten::add_", LayerKind::kElementwise},
      {"aten::sum", LayerKind::kReduction},
      {"aten::embedding", LayerKind::kEmbedding},
      {"aten::detach", LayerKind::kAlias},
      {"aten::t", LayerKind::kAlias},
      {"aten::_unsafe_view", LayerKind::kAlias},
      {"aten::empty", LayerKind::kAllocation},
      {"aten::new_empty_strided", LayerKind::kAllocation},
      {"cudnnConvolutionForward", LayerKind::kConvolution},
      {"cudnnConvolutionBackwardData", LayerKind::kConvolutionBackward},
      {"sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw", LayerKind::kConvolution},
      {"sm80_xmma_dgrad_implicit_gemm_indexed_tf32f32", LayerKind::kConvolutionBackward},
      {"volta_sgemm_128x64_nn", LayerKind::kGemm},
      {"cublasSgemm_v2", LayerKind::kGemm},
      {"cublasLtMatmul", LayerKind::kGemm},
      {"void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>", LayerKind::kBatchNorm},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>", LayerKind::kElementwise},
      {"void at::native::(anonymous namespace)::softmax_warp_forward<float>", LayerKind::kSoftmax},
      {"void at::native::(anonymous namespace)::max_pool_forward_nchw<float>", LayerKind::kPooling},
      {"cudnnRNNForward", LayerKind::kLstm},
      {"fmha_cutlassF_f32_aligned_64x64_rf_sm80", LayerKind::kAttention},
      {"my_custom_kernel", LayerKind::kUnknown},
  };
  for (const auto& [name, kind] : cases) EXPECT_EQ(ClassifyOpName(name), kind) << name << " -> " << Name(ClassifyOpName(name));
}

TEST(LayerCost, FormulasMatchTheRecordedCounts) {
  // ResNet-50's first convolution at batch 128: 3 -> 64 channels, 7x7, 224x224 -> 112x112.
  EXPECT_EQ(ConvFlops({128, 3, 224, 224, 64, 7, 7, 112, 112}), 30211571712ull);
  const trace::Iteration resnet = testing::LoadOrDie(testing::WorkloadPath("workloads/resnet50-b128.json"));
  EXPECT_EQ(resnet.ops[0].flops, 30211571712ull);
  // GPT-2's QKV projection: [8·1024, 768] x [768, 2304].
  EXPECT_EQ(GemmFlops(8 * 1024, 2304, 768), 28991029248ull);
  EXPECT_EQ(ElementwiseFlops(1000, 1), 1000u);
  EXPECT_EQ(PoolingFlops(100, 3, 3), 900u);
  // One LSTM layer step: 4 gates of 2·H·(I+H) per sample plus ten per hidden unit.
  EXPECT_EQ(LstmFlops(1, 1, 10, 20), 4 * 2 * 20 * 30 + 10 * 20u);
  // Attention, B=1, S=4, D=8, H=2: 8·1·4·64 + 4·1·16·8 + 5·1·2·16.
  EXPECT_EQ(SelfAttentionFlops(1, 4, 8, 2), 8 * 4 * 64 + 4 * 16 * 8 + 5 * 2 * 16u);
}

TEST(LayerCost, EstimatesFromSizesWhereCountsAreMissing) {
  const trace::Iteration gpt2 = testing::LoadOrDie(testing::WorkloadPath("workloads/gpt2small-b8-s1024.json"));
  int gemms = 0;
  for (const trace::Op& op : gpt2.ops) {
    if (op.name != "aten::mm" && op.name != "aten::addmm") continue;
    bool real = true;  // the loss gradient enters as a 1-element expanded view: no shape to infer from
    for (trace::BufferId b : op.reads) real = real && gpt2.buffers[b].bytes > 4;
    if (!real) continue;
    trace::Op missing = op;
    missing.flops = 0;
    EXPECT_EQ(EstimateFlops(missing, gpt2), op.flops) << op.id << " " << op.name;  // plain GEMMs are exact
    ++gemms;
  }
  EXPECT_GT(gemms, 50);
  // VGG-16's convolutions are all 3x3 with equal input and output extents: the estimate is exact.
  const trace::Iteration vgg = testing::LoadOrDie(testing::WorkloadPath("workloads/vgg16-b64.json"));
  double recorded = 0, estimated = 0;
  for (const trace::Op& op : vgg.ops) {
    if (ClassifyOpName(op.name) != LayerKind::kConvolution) continue;
    trace::Op missing = op;
    missing.flops = 0;
    recorded += static_cast<double>(op.flops);
    estimated += static_cast<double>(EstimateFlops(missing, vgg));
  }
  EXPECT_NEAR(estimated / recorded, 1.0, 0.01);
  // Element-wise ops count one per output element, as the workloads do; views and allocations do no work.
  const trace::Iteration resnet = testing::LoadOrDie(testing::WorkloadPath("workloads/resnet50-b128.json"));
  for (const trace::Op& op : resnet.ops) {
    const LayerKind k = ClassifyOpName(op.name);
    trace::Op missing = op;
    missing.flops = 0;
    if (k == LayerKind::kActivation) {
      EXPECT_EQ(EstimateFlops(missing, resnet), op.flops) << op.id;
    }
    if (k == LayerKind::kAlias || k == LayerKind::kAllocation) {
      EXPECT_EQ(EstimateFlops(missing, resnet), 0u);
    }
  }
}

TEST(CostModel, IdealTimeOfResNet50OnTheV100IsTheRooflineSum) {
  const trace::Iteration it = testing::LoadOrDie(testing::WorkloadPath("workloads/resnet50-b128.json"));
  const double ideal_ms = IdealSeconds(OpTimes(it, DefaultProfile())) * 1e3;
  EXPECT_NEAR(ideal_ms, 325.9, 0.05);
}

TEST(CostModel, MissingCountsComeFromTheFormulas) {
  trace::Iteration it;
  const auto a = testing::AddBuffer(it, 4 * 1024 * 512, trace::BufferKind::kInput);
  const auto w = testing::AddBuffer(it, 4 * 512 * 256, trace::BufferKind::kParam);
  const auto c = testing::AddBuffer(it, 4 * 1024 * 256, trace::BufferKind::kActivation);
  testing::AddOp(it, "aten::mm", trace::Phase::kForward, {a, w}, {c}, /*flops=*/0, /*bytes=*/0);
  HwProfile hw = testing::NanosecondProfile();
  EXPECT_NEAR(OpTimes(it, hw)[0], static_cast<double>(GemmFlops(1024, 256, 512)) * 1e-9, 1e-12);
  it.ops[0].duration_ns = 5;  // a measured duration wins
  EXPECT_NEAR(OpTimes(it, hw)[0], 5e-9, 1e-15);
}

TEST(AccessModel, ViewsReadInPlaceOpsReadAndWriteGradientsDieBetweenIterations) {
  trace::Iteration it;
  using trace::BufferKind;
  const auto x = testing::AddBuffer(it, 64, BufferKind::kActivation);
  const auto w = testing::AddBuffer(it, 64, BufferKind::kParam);
  const auto gw = testing::AddBuffer(it, 64, BufferKind::kGrad);
  const auto m = testing::AddBuffer(it, 64, BufferKind::kState);
  testing::AddOp(it, "aten::mm", trace::Phase::kForward, {w}, {x});              // 0
  testing::AddOp(it, "aten::relu_", trace::Phase::kForward, {x}, {x});           // 1: in place
  testing::AddOp(it, "aten::detach", trace::Phase::kForward, {}, {x});           // 2: a view of x
  testing::AddOp(it, "aten::new_empty_strided", trace::Phase::kBackward, {}, {gw});  // 3
  testing::AddOp(it, "aten::mm", trace::Phase::kBackward, {x}, {gw});            // 4
  testing::AddOp(it, "aten::add_", trace::Phase::kOptimizer, {m, gw}, {m});      // 5
  testing::AddOp(it, "aten::add_", trace::Phase::kOptimizer, {w, m}, {w});       // 6
  const AccessModel a = BuildAccessModel(it);
  EXPECT_EQ(a.ops[2].reads, std::vector<trace::BufferId>{x});
  EXPECT_TRUE(a.ops[2].writes.empty());
  EXPECT_EQ(a.read_from[2][0], 1u);  // the view sees relu_'s value
  EXPECT_EQ(a.read_from[1][0], 0u);
  EXPECT_TRUE(a.persistent[gw]);
  EXPECT_TRUE(a.dead_at_wrap[gw]);   // written before anything reads it
  EXPECT_FALSE(a.dead_at_wrap[m]);   // optimizer state carries over
  EXPECT_FALSE(a.dead_at_wrap[w]);
  EXPECT_TRUE(a.recomputable[0]);
  EXPECT_TRUE(a.recomputable[1]);
  EXPECT_FALSE(a.recomputable[2]);   // views produce nothing
  EXPECT_FALSE(a.recomputable[4]);   // backward
  EXPECT_EQ(a.uses[x], (std::vector<uint32_t>{0, 1, 2, 4}));
}

}  // namespace
}  // namespace karma::policy
