// The operands and work libkarma.so records for cuDNN convolutions, read from real descriptors and execution plans
// of simcuda's libcudnn.so.9: legacy descriptors, the backend plan -> graph walk, and its fallbacks.
#include <cudnn.h>
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "runtime/observe/library_ops.h"
#include "simcuda/cudnn_graph.h"

namespace karma::rt {
namespace {

// A write of every byte of the operand's extent: a write that skips no bytes of it.
bool WritesWhole(const Operand& o) { return o.access == Access::kWrite && !o.gaps; }

constexpr int64_t N = 2, C = 3, H = 8, W = 8, K = 4;

CudaApi Api() {
  CudaApi api;
  api.cudnnGetStream = &cudnnGetStream;
  api.cudnnGetTensorNdDescriptor = &cudnnGetTensorNdDescriptor;
  api.cudnnGetFilterNdDescriptor = &cudnnGetFilterNdDescriptor;
  api.cudnnBackendGetAttribute = &cudnnBackendGetAttribute;
  api.cudnnBackendCreateDescriptor = &cudnnBackendCreateDescriptor;
  api.cudnnBackendDestroyDescriptor = &cudnnBackendDestroyDescriptor;
  api.cudnnBackendSetAttribute = &cudnnBackendSetAttribute;
  api.cudnnBackendFinalize = &cudnnBackendFinalize;
  api.cudnnCreateTensorDescriptor = &cudnnCreateTensorDescriptor;
  api.cudnnSetTensorNdDescriptor = &cudnnSetTensorNdDescriptor;
  api.cudnnDestroyTensorDescriptor = &cudnnDestroyTensorDescriptor;
  api.cudnnCreateFilterDescriptor = &cudnnCreateFilterDescriptor;
  api.cudnnSetFilterNdDescriptor = &cudnnSetFilterNdDescriptor;
  api.cudnnDestroyFilterDescriptor = &cudnnDestroyFilterDescriptor;
  api.cudnnCreateConvolutionDescriptor = &cudnnCreateConvolutionDescriptor;
  api.cudnnGetConvolutionNdDescriptor = &cudnnGetConvolutionNdDescriptor;
  api.cudnnSetConvolutionNdDescriptor = &cudnnSetConvolutionNdDescriptor;
  api.cudnnGetConvolutionMathType = &cudnnGetConvolutionMathType;
  api.cudnnSetConvolutionMathType = &cudnnSetConvolutionMathType;
  api.cudnnGetConvolutionGroupCount = &cudnnGetConvolutionGroupCount;
  api.cudnnSetConvolutionGroupCount = &cudnnSetConvolutionGroupCount;
  api.cudnnDestroyConvolutionDescriptor = &cudnnDestroyConvolutionDescriptor;
  return api;
}

simcuda_graph::ConvSpec Spec(simcuda_graph::ConvPass pass, double beta = 0) {
  simcuda_graph::ConvSpec s;
  s.pass = pass;
  const int64_t x[4] = {N, C, H, W}, w[4] = {K, C, 3, 3}, y[4] = {N, K, H, W};
  std::copy(x, x + 4, s.x);
  std::copy(w, w + 4, s.w);
  std::copy(y, y + 4, s.y);
  s.pad[0] = s.pad[1] = 1;
  s.beta = beta;
  return s;
}

// The x (N, C, H, W), filter (K, C, 3, 3) and y (N, K, H, W) descriptors of one float NCHW convolution.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  Descriptors() {
    EXPECT_EQ(cudnnCreateTensorDescriptor(&x), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateTensorDescriptor(&y), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateFilterDescriptor(&w), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, H, W), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, 3, 3), CUDNN_STATUS_SUCCESS);
  }
  ~Descriptors() { Destroy(); }
  void Destroy() {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    x = y = nullptr;
    w = nullptr;
  }
};

// Device buffers for x, w and y with x and w filled with small integers (exact in float), and y read back.
struct Buffers {
  void *x = nullptr, *w = nullptr, *y = nullptr;
  Buffers();
  ~Buffers() {
    for (void* p : {x, w, y}) cudaFree(p);
  }
  // y's contents, then y is set to NaNs so that the next convolution must write it again.
  std::vector<float> TakeY();
};

constexpr uint64_t kFlops = 2ull * N * K * H * W * C * 9;
constexpr uint64_t kXBytes = 4ull * N * C * H * W, kWBytes = 4ull * K * C * 9, kYBytes = 4ull * N * K * H * W;

Buffers::Buffers() {
  EXPECT_EQ(cudaMalloc(&x, kXBytes), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&w, kWBytes), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&y, kYBytes), cudaSuccess);
  std::vector<float> hx(N * C * H * W), hw(K * C * 9);
  for (size_t i = 0; i < hx.size(); ++i) hx[i] = static_cast<float>((i * 7) % 13) - 6.0f;
  for (size_t i = 0; i < hw.size(); ++i) hw[i] = static_cast<float>((i * 5) % 11) * 0.25f - 1.0f;
  EXPECT_EQ(cudaMemcpy(x, hx.data(), kXBytes, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(w, hw.data(), kWBytes, cudaMemcpyHostToDevice), cudaSuccess);
}

std::vector<float> Buffers::TakeY() {
  std::vector<float> out(N * K * H * W);
  EXPECT_EQ(cudaMemcpy(out.data(), y, kYBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemset(y, 0xff, kYBytes), cudaSuccess);
  return out;
}

// Fake device addresses: BackendOp reads the variant pack, never the memory.
void* Ptr(uint64_t a) { return reinterpret_cast<void*>(a); }

// A variant pack of (uid, address) pairs and a workspace at 0xf000.
struct Pack {
  cudnnBackendDescriptor_t d = nullptr;
  Pack(const std::vector<int64_t>& uids, const std::vector<void*>& ptrs) {
    void* ws = Ptr(0xf000);
    EXPECT_EQ(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &d), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnBackendSetAttribute(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                       static_cast<int64_t>(uids.size()), uids.data()),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnBackendSetAttribute(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                       static_cast<int64_t>(ptrs.size()), ptrs.data()),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnBackendSetAttribute(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnBackendFinalize(d), CUDNN_STATUS_SUCCESS);
  }
  ~Pack() { cudnnBackendDestroyDescriptor(d); }
};

class CudnnOpsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cudnnCreate(&h_), CUDNN_STATUS_SUCCESS); }
  void TearDown() override {
    for (cudnnBackendDescriptor_t p : plans_) cudnnBackendDestroyDescriptor(p);
    cudnnDestroy(h_);
  }
  cudnnBackendDescriptor_t Plan(const std::vector<simcuda_graph::ConvSpec>& ops) {
    cudnnBackendDescriptor_t plan = nullptr;
    int64_t ws = 0;
    EXPECT_EQ(simcuda_graph::BuildPlan(h_, ops, &plan, &ws), CUDNN_STATUS_SUCCESS);
    plans_.push_back(plan);
    return plan;
  }
  Access Of(const OpDesc& d, uint64_t addr) {
    for (const Operand& o : d.operands) {
      if (o.ptr == addr) return o.access;
    }
    ADD_FAILURE() << "no operand at " << std::hex << addr;
    return Access::kTouch;
  }
  bool Workspace(const OpDesc& d) {
    return std::any_of(d.operands.begin(), d.operands.end(), [](const Operand& o) {
      return o.ptr == 0xf000 && o.workspace && o.access == Access::kReadWrite;
    });
  }

  const CudaApi api_ = Api();
  cudnnHandle_t h_ = nullptr;
  std::vector<cudnnBackendDescriptor_t> plans_;
};

TEST_F(CudnnOpsTest, LegacyDescriptorsGiveTheWork) {
  const Descriptors desc;
  const cudnnTensorDescriptor_t x = desc.x, y = desc.y;
  const cudnnFilterDescriptor_t w = desc.w;
  OpDesc d;
  ConvWork(api_, x, w, y, {nullptr, nullptr, nullptr}, ConvOutput::kY, false, &d);
  EXPECT_EQ(d.flops, kFlops);
  EXPECT_EQ(d.bytes, kXBytes + kWBytes + kYBytes);
  EXPECT_STREQ(d.dtype, "float32");
  OpDesc acc;
  ConvWork(api_, x, w, y, {nullptr, nullptr, nullptr}, ConvOutput::kW, true, &acc);  // a filter gradient accumulated into dw
  EXPECT_EQ(acc.flops, kFlops);
  EXPECT_EQ(acc.bytes, kXBytes + 2 * kWBytes + kYBytes);
  OpDesc unreadable;
  ConvWork(CudaApi{}, x, w, y, {nullptr, nullptr, nullptr}, ConvOutput::kY, false, &unreadable);
  EXPECT_EQ(unreadable.flops, 0u);
}

// A recompute issues a legacy convolution with copies of its descriptors: the copies describe the same
// convolution (math type and group count included) and give the same output after the originals are destroyed.
TEST_F(CudnnOpsTest, DescriptorCopiesOutliveTheOriginalsAndGiveTheSameConvolution) {
  Descriptors desc;
  cudnnConvolutionDescriptor_t conv;
  ASSERT_EQ(cudnnCreateConvolutionDescriptor(&conv), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH), CUDNN_STATUS_SUCCESS);
  Buffers buf;
  const float one = 1, zero = 0;
  auto run = [&](cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t cd,
                 cudnnTensorDescriptor_t yd) {
    EXPECT_EQ(cudnnConvolutionForward(h_, &one, xd, buf.x, wd, buf.w, cd, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                      nullptr, 0, &zero, yd, buf.y),
              CUDNN_STATUS_SUCCESS);
    return buf.TakeY();
  };
  const std::vector<float> original = run(desc.x, desc.w, conv, desc.y);

  auto copy = ConvDescriptors::Copy(api_, desc.x, desc.w, conv, desc.y);
  ASSERT_NE(copy, nullptr);
  cudnnMathType_t math;
  ASSERT_EQ(cudnnGetConvolutionMathType(copy->conv, &math), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(math, CUDNN_FMA_MATH);
  desc.Destroy();
  cudnnDestroyConvolutionDescriptor(conv);
  EXPECT_EQ(run(copy->x, copy->w, copy->conv, copy->y), original);
  EXPECT_NE(original[0], 0.0f);

  // Without the symbols to make descriptors, there is no copy (and no recompute of the call).
  CudaApi partial = api_;
  partial.cudnnSetConvolutionGroupCount = nullptr;
  EXPECT_EQ(ConvDescriptors::Copy(partial, copy->x, copy->w, copy->conv, copy->y), nullptr);
}

// The extent of each operand follows its descriptor: packed tensors span their elements, a strided one (rows
// padded) spans more and has gaps, so its write is not whole; an accumulated output is read, never whole.
TEST_F(CudnnOpsTest, LegacyDescriptorsGiveTheExtents) {
  const Descriptors desc;
  const cudnnTensorDescriptor_t x = desc.x, y = desc.y;
  const cudnnFilterDescriptor_t w = desc.w;
  cudnnTensorDescriptor_t padded;
  ASSERT_EQ(cudnnCreateTensorDescriptor(&padded), CUDNN_STATUS_SUCCESS);
  constexpr int kRow = W + 2;  // two floats of padding after each row
  ASSERT_EQ(cudnnSetTensor4dDescriptorEx(padded, CUDNN_DATA_FLOAT, N, K, H, W, K * H * kRow, H * kRow, kRow, 1),
            CUDNN_STATUS_SUCCESS);
  void* const px = Ptr(0xa000);
  void* const pw = Ptr(0xb000);
  void* const py = Ptr(0xc000);
  auto forward = [&](cudnnTensorDescriptor_t out, bool accumulate) {
    OpDesc d = ConvOp("fwd", 0, {px, pw}, py, accumulate, Ptr(0xf000), 64, 1);
    ConvWork(api_, x, w, out, {px, pw, py}, ConvOutput::kY, accumulate, &d);
    return d;
  };
  auto at = [](const OpDesc& d, void* p) {
    for (const Operand& o : d.operands) {
      if (o.ptr == reinterpret_cast<uint64_t>(p)) return o;
    }
    ADD_FAILURE() << "no operand at " << p;
    return Operand{};
  };

  const OpDesc packed = forward(y, false);
  EXPECT_EQ(at(packed, px).bytes, kXBytes);
  EXPECT_EQ(at(packed, pw).bytes, kWBytes);
  EXPECT_EQ(at(packed, py).bytes, kYBytes);
  for (void* p : {px, pw, py}) EXPECT_FALSE(at(packed, p).gaps);
  EXPECT_TRUE(WritesWhole(at(packed, py)));
  EXPECT_FALSE(WritesWhole(at(packed, px)));  // read, not written
  EXPECT_EQ(packed.operands.back().bytes, 0u);  // the workspace's extent is its own

  const OpDesc strided = forward(padded, false);
  EXPECT_EQ(at(strided, py).bytes, 4ull * ((N - 1) * K * H * kRow + (K - 1) * H * kRow + (H - 1) * kRow + W));
  EXPECT_TRUE(at(strided, py).gaps);
  EXPECT_FALSE(WritesWhole(at(strided, py)));
  EXPECT_EQ(strided.bytes, packed.bytes);  // the work counts elements, not the span

  const OpDesc accumulated = forward(y, true);
  EXPECT_EQ(at(accumulated, py).access, Access::kReadWrite);
  EXPECT_EQ(at(accumulated, py).bytes, kYBytes);
  EXPECT_FALSE(WritesWhole(at(accumulated, py)));

  OpDesc unreadable = ConvOp("fwd", 0, {px, pw}, py, false, nullptr, 0, 1);
  ConvWork(CudaApi{}, x, w, y, {px, pw, py}, ConvOutput::kY, false, &unreadable);
  for (const Operand& o : unreadable.operands) EXPECT_EQ(o.bytes, 0u);
  cudnnDestroyTensorDescriptor(padded);
}

TEST_F(CudnnOpsTest, BackendPlansGiveExactDirections) {
  Pack pack({'x', 'w', 'y'}, {Ptr(0xa000), Ptr(0xb000), Ptr(0xc000)});
  const OpDesc fwd = BackendOp(api_, Plan({Spec(simcuda_graph::kForward)}), pack.d);
  EXPECT_EQ(Of(fwd, 0xa000), Access::kRead);
  EXPECT_EQ(Of(fwd, 0xb000), Access::kRead);
  EXPECT_EQ(Of(fwd, 0xc000), Access::kWrite);
  EXPECT_TRUE(Workspace(fwd));
  EXPECT_EQ(fwd.operands.size(), 4u);
  EXPECT_EQ(fwd.operands[0].bytes, kXBytes);  // the extents, from the tensors' dimensions and strides
  EXPECT_EQ(fwd.operands[1].bytes, kWBytes);
  EXPECT_EQ(fwd.operands[2].bytes, kYBytes);
  EXPECT_TRUE(WritesWhole(fwd.operands[2]));
  EXPECT_FALSE(fwd.operands[2].gaps);
  EXPECT_EQ(fwd.flops, kFlops);
  EXPECT_EQ(fwd.bytes, kXBytes + kWBytes + kYBytes);
  EXPECT_STREQ(fwd.dtype, "float32");
  EXPECT_STREQ(fwd.name, "cudnnBackendExecute (convolution forward)");  // the planner's layer kind

  const OpDesc data = BackendOp(api_, Plan({Spec(simcuda_graph::kBackwardData, 1.0)}), pack.d);
  EXPECT_EQ(Of(data, 0xa000), Access::kReadWrite);  // dx accumulates: beta = 1
  EXPECT_FALSE(WritesWhole(data.operands[0]));
  EXPECT_EQ(Of(data, 0xb000), Access::kRead);
  EXPECT_EQ(Of(data, 0xc000), Access::kRead);
  EXPECT_EQ(data.bytes, 2 * kXBytes + kWBytes + kYBytes);

  const OpDesc filter = BackendOp(api_, Plan({Spec(simcuda_graph::kBackwardFilter)}), pack.d);
  EXPECT_EQ(Of(filter, 0xa000), Access::kRead);
  EXPECT_EQ(Of(filter, 0xb000), Access::kWrite);
  EXPECT_EQ(Of(filter, 0xc000), Access::kRead);
  EXPECT_STREQ(data.name, "cudnnBackendExecute (convolution backward data)");
  EXPECT_STREQ(filter.name, "cudnnBackendExecute (convolution backward filter)");
  EXPECT_TRUE(IsForwardConvolution(fwd));
  EXPECT_FALSE(IsForwardConvolution(data));
  EXPECT_FALSE(IsForwardConvolution(filter));
  EXPECT_NE(fwd.shape, 0u);
}

// A recompute issues a backend convolution with a plan of the session's own, made from the application's plan's
// engine configuration: the same output after the application's plan is destroyed, one copy per plan and graph.
TEST_F(CudnnOpsTest, BackendPlanCopyOutlivesTheApplicationsPlanAndGivesTheSameConvolution) {
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t ws = 0;
  ASSERT_EQ(simcuda_graph::BuildPlan(h_, {Spec(simcuda_graph::kForward)}, &plan, &ws), CUDNN_STATUS_SUCCESS);
  Buffers buf;
  void* work = nullptr;
  ASSERT_EQ(cudaMalloc(&work, std::max<int64_t>(ws, 1)), cudaSuccess);
  ASSERT_EQ(simcuda_graph::Execute(h_, plan, {'x', 'w', 'y'}, {buf.x, buf.w, buf.y}, work), CUDNN_STATUS_SUCCESS);
  const std::vector<float> original = buf.TakeY();

  auto copy = BackendPlanCopy::For(api_, h_, plan, 1);
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(BackendPlanCopy::For(api_, h_, plan, 1), copy);  // made once
  EXPECT_NE(BackendPlanCopy::For(api_, h_, plan, 2), copy);  // another graph at the same address
  cudnnBackendDestroyDescriptor(plan);
  VariantPack pack;
  pack.uids = {'x', 'w', 'y'};
  pack.pointers = {buf.x, buf.w, buf.y};
  pack.workspace = work;
  ASSERT_TRUE(copy->Execute(&cudnnBackendExecute, h_, pack));
  EXPECT_EQ(buf.TakeY(), original);
  EXPECT_NE(original[0], 0.0f);

  // Without the symbols to make a plan, there is no copy (and no recompute of the call).
  CudaApi partial = api_;
  partial.cudnnBackendFinalize = nullptr;
  EXPECT_EQ(BackendPlanCopy::For(partial, h_, plan, 3), nullptr);
  cudaFree(work);
}

TEST_F(CudnnOpsTest, GraphsOfSeveralConvolutionsMergeDirections) {
  // Two forward convolutions of the same input: x read by both, each output written.
  simcuda_graph::ConvSpec a = Spec(simcuda_graph::kForward), b = Spec(simcuda_graph::kForward);
  b.uid[1] = 'v';
  b.uid[2] = 'z';
  Pack pack({'x', 'w', 'y', 'v', 'z'}, {Ptr(0xa000), Ptr(0xb000), Ptr(0xc000), Ptr(0xd000), Ptr(0xe000)});
  const OpDesc d = BackendOp(api_, Plan({a, b}), pack.d);
  EXPECT_EQ(Of(d, 0xa000), Access::kRead);
  EXPECT_EQ(Of(d, 0xb000), Access::kRead);
  EXPECT_EQ(Of(d, 0xc000), Access::kWrite);
  EXPECT_EQ(Of(d, 0xd000), Access::kRead);
  EXPECT_EQ(Of(d, 0xe000), Access::kWrite);
  EXPECT_EQ(d.flops, 2 * kFlops);
}

TEST_F(CudnnOpsTest, WhatCannotBeReadIsTouched) {
  // A graph mixing operation types cannot be read back into descriptors of one type.
  Pack mixed_pack({'x', 'w', 'y', 'u', 'v'}, {Ptr(0xa000), Ptr(0xb000), Ptr(0xc000), Ptr(0xd000), Ptr(0xe000)});
  simcuda_graph::ConvSpec data = Spec(simcuda_graph::kBackwardData);
  data.uid[0] = 'u';
  data.uid[2] = 'v';
  const OpDesc mixed = BackendOp(api_, Plan({Spec(simcuda_graph::kForward), data}), mixed_pack.d);
  for (uint64_t a : {0xa000, 0xb000, 0xc000, 0xd000, 0xe000}) EXPECT_EQ(Of(mixed, a), Access::kTouch) << a;
  EXPECT_TRUE(Workspace(mixed));
  EXPECT_EQ(mixed.flops, 0u);

  // A pointer the graph does not name; no plan; no way to create descriptors.
  Pack extra({'x', 'w', 'y', 'q'}, {Ptr(0xa000), Ptr(0xb000), Ptr(0xc000), Ptr(0xd000)});
  const cudnnBackendDescriptor_t plan = Plan({Spec(simcuda_graph::kForward)});
  const OpDesc d = BackendOp(api_, plan, extra.d);
  EXPECT_EQ(Of(d, 0xa000), Access::kRead);
  EXPECT_EQ(Of(d, 0xd000), Access::kTouch);
  EXPECT_EQ(Of(BackendOp(api_, nullptr, extra.d), 0xa000), Access::kTouch);
  CudaApi no_create = api_;
  no_create.cudnnBackendCreateDescriptor = nullptr;
  EXPECT_EQ(Of(BackendOp(no_create, plan, extra.d), 0xc000), Access::kTouch);
  // The pack passed as the plan: the walk fails at its first step.
  EXPECT_EQ(Of(BackendOp(api_, extra.d, extra.d), 0xc000), Access::kTouch);
}

}  // namespace
}  // namespace karma::rt
