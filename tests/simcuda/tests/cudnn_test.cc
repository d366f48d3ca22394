// simcuda's libcudnn.so.9 through its exported API: legacy convolutions, algorithm queries, workspaces, errors, the
// kernels' virtual time and faults, and the backend API's graphs giving the same bits as the legacy calls.
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "api/process.h"
#include "device/conv.h"
#include "simcuda/cudnn_graph.h"

namespace {

const bool kEnvironment = [] {
  setenv("SIMCUDA_GPU", "a100-40g-pcie4", 1);
  setenv("SIMCUDA_MEM", "64MiB", 1);
  return true;
}();

// x: N x C x H x W, filter K x C x 3 x 3, "same" padding, stride 1.
constexpr int N = 2, C = 3, H = 8, W = 7, K = 4, R = 3, S = 3;

std::vector<float> Values(size_t n, float scale, int salt) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int>((i * 7 + salt) % 23) - 11);
  return v;
}

float* Upload(const std::vector<float>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  return static_cast<float*>(p);
}

std::vector<float> Download(const float* dev, size_t n) {
  std::vector<float> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// The device-level function the library must match bit for bit.
simcuda::ConvGeometry Geometry() {
  simcuda::ConvGeometry g{};
  g.n = N, g.c = C, g.h = H, g.w = W, g.k = K, g.r = R, g.s = S, g.p = H, g.q = W;
  g.pad_h = g.pad_w = 1, g.stride_h = g.stride_w = 1, g.dil_h = g.dil_w = 1, g.flip = 0;
  const int64_t xs[4] = {C * H * W, H * W, W, 1}, ys[4] = {K * H * W, H * W, W, 1};
  std::copy(xs, xs + 4, g.x_strides);
  std::copy(ys, ys + 4, g.y_strides);
  return g;
}

// Descriptors of an n x c x h x w input, a k x c x 3 x 3 filter, "same" padding.
struct Legacy {
  cudnnHandle_t h = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  Legacy() : Legacy(N, C, H, W, K) {}
  Legacy(int xn, int xc, int xh, int xw, int yk) {
    EXPECT_EQ(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateTensorDescriptor(&x), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateTensorDescriptor(&y), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateFilterDescriptor(&w), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateConvolutionDescriptor(&conv), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, xn, xc, xh, xw),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, yk, xc, R, S), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              CUDNN_STATUS_SUCCESS);
    int n = 0, c = 0, hh = 0, ww = 0;
    EXPECT_EQ(cudnnGetConvolution2dForwardOutputDim(conv, x, w, &n, &c, &hh, &ww), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(n, xn);
    EXPECT_EQ(c, yk);
    EXPECT_EQ(hh, xh);
    EXPECT_EQ(ww, xw);
    EXPECT_EQ(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, hh, ww), CUDNN_STATUS_SUCCESS);
  }
  ~Legacy() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroy(h);
  }
};

TEST(Cudnn, LegacyConvolutionsMatchTheDeviceFunctionsBitForBit) {
  Legacy l;
  const auto x = Values(N * C * H * W, 0.125f, 1), w = Values(K * C * R * S, 0.0625f, 2),
             dy = Values(N * K * H * W, 0.25f, 3);
  float *dx_in = Upload(x), *dw_in = Upload(w), *ddy = Upload(dy);
  float *dy_out = Upload(std::vector<float>(dy.size())), *ddx = Upload(std::vector<float>(x.size())),
        *ddw = Upload(std::vector<float>(w.size()));
  const simcuda::ConvGeometry g = Geometry();
  std::vector<float> col(simcuda::ConvColumnFloats(g)), want_y(dy.size()), want_dx(x.size()), want_dw(w.size());
  simcuda::ConvForward(g, 1, x.data(), w.data(), 0, want_y.data(), col.data());
  simcuda::ConvBackwardData(g, 1, w.data(), dy.data(), 0, want_dx.data(), col.data());
  simcuda::ConvBackwardFilter(g, 1, x.data(), dy.data(), 0, want_dw.data(), col.data());

  // Every supported algorithm, with its workspace, gives the same bits.
  size_t ws_bytes = 0;
  ASSERT_EQ(cudnnGetConvolutionForwardWorkspaceSize(l.h, l.x, l.w, l.conv, l.y, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                                    &ws_bytes),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(ws_bytes, static_cast<size_t>(C * R * S * H * W * 4));
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, ws_bytes), cudaSuccess);
  const float one = 1, zero = 0;
  for (auto algo : {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM}) {
    ASSERT_EQ(cudnnConvolutionForward(l.h, &one, l.x, dx_in, l.w, dw_in, l.conv, algo, ws, ws_bytes, &zero, l.y,
                                      dy_out),
              CUDNN_STATUS_SUCCESS);
    const auto y = Download(dy_out, dy.size());
    EXPECT_EQ(std::memcmp(y.data(), want_y.data(), y.size() * 4), 0) << algo;
  }
  for (auto algo : {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0}) {
    ASSERT_EQ(cudnnConvolutionBackwardData(l.h, &one, l.w, dw_in, l.y, ddy, l.conv, algo, ws, ws_bytes, &zero, l.x,
                                           ddx),
              CUDNN_STATUS_SUCCESS);
    const auto dx = Download(ddx, x.size());
    EXPECT_EQ(std::memcmp(dx.data(), want_dx.data(), dx.size() * 4), 0) << algo;
  }
  for (auto algo : {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3}) {
    ASSERT_EQ(cudnnConvolutionBackwardFilter(l.h, &one, l.x, dx_in, l.y, ddy, l.conv, algo, ws, ws_bytes, &zero, l.w,
                                             ddw),
              CUDNN_STATUS_SUCCESS);
    const auto dw = Download(ddw, w.size());
    EXPECT_EQ(std::memcmp(dw.data(), want_dw.data(), dw.size() * 4), 0) << algo;
  }
  // beta = 1 accumulates into the filter gradient.
  ASSERT_EQ(cudnnConvolutionBackwardFilter(l.h, &one, l.x, dx_in, l.y, ddy, l.conv, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                                           nullptr, 0, &one, l.w, ddw),
            CUDNN_STATUS_SUCCESS);
  const auto dw2 = Download(ddw, w.size());
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(dw2[i], want_dw[i] + want_dw[i]) << i;

  // Errors: a workspace algorithm without its workspace, an unsupported algorithm, a wrong output shape.
  EXPECT_EQ(cudnnConvolutionForward(l.h, &one, l.x, dx_in, l.w, dw_in, l.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws,
                                    ws_bytes - 4, &zero, l.y, dy_out),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnConvolutionForward(l.h, &one, l.x, dx_in, l.w, dw_in, l.conv, CUDNN_CONVOLUTION_FWD_ALGO_FFT, ws,
                                    ws_bytes, &zero, l.y, dy_out),
            CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cudnnConvolutionForward(l.h, &one, l.x, dx_in, l.w, dw_in, l.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws,
                                    ws_bytes, &zero, l.x, dy_out),
            CUDNN_STATUS_BAD_PARAM);
  cudnnTensorDescriptor_t half = nullptr;
  ASSERT_EQ(cudnnCreateTensorDescriptor(&half), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetTensor4dDescriptor(half, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, N, C, H, W), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnConvolutionForward(l.h, &one, half, dx_in, l.w, dw_in, l.conv, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws,
                                    ws_bytes, &zero, l.y, dy_out),
            CUDNN_STATUS_NOT_SUPPORTED);
  cudnnDestroyTensorDescriptor(half);
  // A function simcuda does not implement answers "not supported".
  EXPECT_EQ(cudnnIm2Col(l.h, l.x, dx_in, l.w, l.conv, ws), CUDNN_STATUS_NOT_SUPPORTED);
  for (void* p : {static_cast<void*>(dx_in), static_cast<void*>(dw_in), static_cast<void*>(ddy),
                  static_cast<void*>(dy_out), static_cast<void*>(ddx), static_cast<void*>(ddw), ws}) {
    ASSERT_EQ(cudaFree(p), cudaSuccess);
  }
}

TEST(Cudnn, HeuristicsSearchesAndDescriptorsAnswerLikeCudnn) {
  Legacy l;
  int count = 0;
  ASSERT_EQ(cudnnGetConvolutionForwardAlgorithmMaxCount(l.h, &count), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(count, CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(count);
  int returned = 0;
  ASSERT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(l.h, l.x, l.w, l.conv, l.y, count, &returned, perf.data()),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(returned, count);
  EXPECT_EQ(perf[0].algo, CUDNN_CONVOLUTION_FWD_ALGO_GEMM);  // the workspace algorithm first
  EXPECT_EQ(perf[0].status, CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(perf[0].memory, static_cast<size_t>(C * R * S * H * W * 4));
  EXPECT_EQ(perf[0].determinism, CUDNN_DETERMINISTIC);
  EXPECT_GT(perf[0].time, 0.0f);
  EXPECT_EQ(perf[count - 1].status, CUDNN_STATUS_NOT_SUPPORTED);
  ASSERT_EQ(cudnnFindConvolutionForwardAlgorithm(l.h, l.x, l.w, l.conv, l.y, 2, &returned, perf.data()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(returned, 2);
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> data_perf(4);
  ASSERT_EQ(cudnnGetConvolutionBackwardDataAlgorithm_v7(l.h, l.w, l.y, l.conv, l.x, 4, &returned, data_perf.data()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(data_perf[0].algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> filter_perf(4);
  ASSERT_EQ(cudnnFindConvolutionBackwardFilterAlgorithm(l.h, l.x, l.y, l.conv, l.w, 4, &returned, filter_perf.data()),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(filter_perf[0].algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  size_t bytes = 1;
  ASSERT_EQ(cudnnGetConvolutionBackwardFilterWorkspaceSize(l.h, l.x, l.y, l.conv, l.w,
                                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, &bytes),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(bytes, 0u);

  // What libkarma.so reads from descriptors to size a call's operands.
  cudnnDataType_t type;
  int nb = 0, dims[CUDNN_DIM_MAX], strides[CUDNN_DIM_MAX];
  ASSERT_EQ(cudnnGetTensorNdDescriptor(l.y, CUDNN_DIM_MAX, &type, &nb, dims, strides), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(type, CUDNN_DATA_FLOAT);
  EXPECT_EQ(nb, 4);
  EXPECT_EQ(dims[1], K);
  EXPECT_EQ(strides[0], K * H * W);
  cudnnTensorFormat_t format;
  ASSERT_EQ(cudnnGetFilterNdDescriptor(l.w, CUDNN_DIM_MAX, &type, &format, &nb, dims), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(format, CUDNN_TENSOR_NCHW);
  EXPECT_EQ(dims[0] * dims[1] * dims[2] * dims[3], K * C * R * S);
  size_t size = 0;
  ASSERT_EQ(cudnnGetTensorSizeInBytes(l.x, &size), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(size, static_cast<size_t>(N * C * H * W * 4));
  ASSERT_EQ(cudnnSetTensor4dDescriptor(l.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, N, C, H, W), CUDNN_STATUS_SUCCESS);
  int n, c, h, w, ns, cs, hs, ws;
  ASSERT_EQ(cudnnGetTensor4dDescriptor(l.x, &type, &n, &c, &h, &w, &ns, &cs, &hs, &ws), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cs, 1);
  EXPECT_EQ(ws, C);
  EXPECT_EQ(hs, W * C);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(l.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 0, C, H, W), CUDNN_STATUS_BAD_PARAM);

  cudaStream_t s = nullptr, got = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudnnSetStream(l.h, s), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnGetStream(l.h, &got), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(got, s);
  EXPECT_EQ(cudnnGetVersion(), static_cast<size_t>(CUDNN_VERSION));
  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM");
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// A convolution is device work: it costs launch + flops / F on the profile, and faults in managed operands.
TEST(Cudnn, ConvolutionsCostVirtualTimeAndFaultInManagedOperands) {
  // Large enough to be compute-bound on the profile.
  const int n = 2, c = 32, h = 16, w_ = 16, k = 32;
  Legacy l(n, c, h, w_, k);
  simcuda::ConvGeometry g = Geometry();
  g.n = n, g.c = c, g.h = g.p = h, g.w = g.q = w_, g.k = k;
  const auto x = Values(n * c * h * w_, 0.125f, 1), w = Values(k * c * R * S, 0.0625f, 2);
  float *mx = nullptr, *dw = Upload(w), *dy = Upload(std::vector<float>(n * k * h * w_));
  ASSERT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&mx), x.size() * 4, cudaMemAttachGlobal), cudaSuccess);
  std::memcpy(mx, x.data(), x.size() * 4);  // on the host: the convolution must fault it in
  cudaEvent_t a, b;
  ASSERT_EQ(cudaEventCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&b), cudaSuccess);
  const simcuda::Stats before = simcuda::Global()->GetStats();
  const float one = 1, zero = 0;
  ASSERT_EQ(cudaEventRecord(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudnnConvolutionForward(l.h, &one, l.x, mx, l.w, dw, l.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                    nullptr, 0, &zero, l.y, dy),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudaEventRecord(b, nullptr), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(b), cudaSuccess);
  const simcuda::Stats after = simcuda::Global()->GetStats();
  EXPECT_EQ(after.kernels, before.kernels + 1);
  EXPECT_EQ(after.faults, before.faults + 1);
  float first_ms = 0;
  ASSERT_EQ(cudaEventElapsedTime(&first_ms, a, b), cudaSuccess);

  // Again, resident now: exactly the launch overhead plus the flops at the profile's rate, after the host time
  // of recording `a` (the device is idle: the kernel starts when the host has launched it).
  ASSERT_EQ(cudaEventRecord(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudnnConvolutionForward(l.h, &one, l.x, mx, l.w, dw, l.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                    nullptr, 0, &zero, l.y, dy),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudaEventRecord(b, nullptr), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(b), cudaSuccess);
  float ms = 0;
  ASSERT_EQ(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
  const auto& hw = simcuda::Global()->config().profile;
  const double bytes = 4.0 * (x.size() + w.size() + n * k * h * w_);
  ASSERT_GT(simcuda::ConvFlops(g) / hw.flops_per_s, bytes / hw.memory_bw);  // compute-bound, as intended
  const double want_ms = 1e3 * (hw.host.order_call_s + hw.kernel_launch_s + simcuda::ConvFlops(g) / hw.flops_per_s);
  EXPECT_NEAR(ms, want_ms, 1e-6 + 1e-5 * want_ms);
  EXPECT_GT(first_ms, ms + 1e3 * hw.fault_latency_s * 0.99);  // the fault stalled the first one
  ASSERT_EQ(cudaFree(mx), cudaSuccess);
  ASSERT_EQ(cudaFree(dw), cudaSuccess);
  ASSERT_EQ(cudaFree(dy), cudaSuccess);
}

// ---- the backend API -----------------------------------------------------------------------------------

cudnnBackendDescriptor_t Make(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  EXPECT_EQ(cudnnBackendCreateDescriptor(type, &d), CUDNN_STATUS_SUCCESS);
  return d;
}

void Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n,
         const void* v) {
  ASSERT_EQ(cudnnBackendSetAttribute(d, name, type, n, v), CUDNN_STATUS_SUCCESS) << name;
}

// The plan of a one-operation graph over the test's shapes, built as the cuDNN frontend builds it.
cudnnBackendDescriptor_t Plan(cudnnHandle_t h, simcuda_graph::ConvPass pass) {
  simcuda_graph::ConvSpec spec;
  spec.pass = pass;
  const int64_t x[4] = {N, C, H, W}, w[4] = {K, C, R, S}, y[4] = {N, K, H, W};
  std::copy(x, x + 4, spec.x);
  std::copy(w, w + 4, spec.w);
  std::copy(y, y + 4, spec.y);
  spec.pad[0] = spec.pad[1] = 1;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
  EXPECT_EQ(simcuda_graph::BuildPlan(h, {spec}, &plan, &workspace), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(workspace, static_cast<int64_t>(C * R * S * H * W * 4));
  return plan;
}

void Execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, float* x, float* w, float* y, void* ws) {
  ASSERT_EQ(simcuda_graph::Execute(h, plan, {'x', 'w', 'y'}, {x, w, y}, ws), CUDNN_STATUS_SUCCESS);
}

TEST(Cudnn, BackendGraphsGiveTheLegacyResults) {
  Legacy l;
  const auto x = Values(N * C * H * W, 0.125f, 1), w = Values(K * C * R * S, 0.0625f, 2),
             dy = Values(N * K * H * W, 0.25f, 3);
  const simcuda::ConvGeometry g = Geometry();
  std::vector<float> col(simcuda::ConvColumnFloats(g)), want_y(dy.size()), want_dx(x.size()), want_dw(w.size());
  simcuda::ConvForward(g, 1, x.data(), w.data(), 0, want_y.data(), col.data());
  simcuda::ConvBackwardData(g, 1, w.data(), dy.data(), 0, want_dx.data(), col.data());
  simcuda::ConvBackwardFilter(g, 1, x.data(), dy.data(), 0, want_dw.data(), col.data());
  float *dx_in = Upload(x), *dw_in = Upload(w), *ddy = Upload(dy), *out = Upload(std::vector<float>(dy.size()));
  float *ddx = Upload(std::vector<float>(x.size())), *ddw = Upload(std::vector<float>(w.size()));
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, simcuda::ConvColumnFloats(g) * 4), cudaSuccess);

  auto plan = Plan(l.h, simcuda_graph::kForward);
  int64_t count = 0;
  Execute(l.h, plan, dx_in, dw_in, out, ws);
  auto got = Download(out, dy.size());
  EXPECT_EQ(std::memcmp(got.data(), want_y.data(), got.size() * 4), 0);

  // The walk libkarma.so makes from a plan to its operation's operands: plan -> configuration -> engine -> graph
  // -> operations -> tensors -> unique ids, each level into a descriptor the caller created.
  auto cfg = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR), engine = Make(CUDNN_BACKEND_ENGINE_DESCRIPTOR),
       graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR),
       op = Make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR), t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR),
       wrong = Make(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
  ASSERT_EQ(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &count, &cfg),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                                     &engine),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &count, &graph),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendGetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                                     &wrong),
            CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE);
  ASSERT_EQ(cudnnBackendGetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                                     &op),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(count, 1);
  ASSERT_EQ(cudnnBackendGetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &count, &t),
            CUDNN_STATUS_SUCCESS);
  int64_t uid = 0;
  ASSERT_EQ(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &count, &uid),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(uid, 'y');
  float beta = 1;
  ASSERT_EQ(cudnnBackendGetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &count,
                                     &beta),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(beta, 0.0f);
  for (void* d : {cfg, engine, graph, op, t, wrong, plan}) {
    ASSERT_EQ(cudnnBackendDestroyDescriptor(d), CUDNN_STATUS_SUCCESS);
  }

  plan = Plan(l.h, simcuda_graph::kBackwardData);
  Execute(l.h, plan, ddx, dw_in, ddy, ws);
  got = Download(ddx, x.size());
  EXPECT_EQ(std::memcmp(got.data(), want_dx.data(), got.size() * 4), 0);
  ASSERT_EQ(cudnnBackendDestroyDescriptor(plan), CUDNN_STATUS_SUCCESS);

  plan = Plan(l.h, simcuda_graph::kBackwardFilter);
  Execute(l.h, plan, dx_in, ddw, ddy, ws);
  got = Download(ddw, w.size());
  EXPECT_EQ(std::memcmp(got.data(), want_dw.data(), got.size() * 4), 0);

  // Errors: a missing operand, no workspace, attributes after finalization, descriptor type checks.
  auto pack = Make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[2] = {'x', 'y'};
  void* ptrs[2] = {dx_in, ddy};
  Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 2, uids);
  Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 2, ptrs);
  ASSERT_EQ(cudnnBackendFinalize(pack), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnBackendExecute(l.h, plan, pack), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnBackendExecute(l.h, pack, plan), CUDNN_STATUS_BAD_PARAM);
  auto op2 = Make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  EXPECT_EQ(cudnnBackendSetAttribute(op2, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                     1, &plan),
            CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE);
  EXPECT_EQ(cudnnBackendSetAttribute(op2, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_INT64, 1, uids),
            CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
  EXPECT_EQ(cudnnBackendFinalize(op2), CUDNN_STATUS_BAD_PARAM);  // required attributes missing
  for (void* d : {pack, op2, plan}) ASSERT_EQ(cudnnBackendDestroyDescriptor(d), CUDNN_STATUS_SUCCESS);
  for (void* p : {static_cast<void*>(dx_in), static_cast<void*>(dw_in), static_cast<void*>(ddy),
                  static_cast<void*>(out), static_cast<void*>(ddx), static_cast<void*>(ddw), ws}) {
    ASSERT_EQ(cudaFree(p), cudaSuccess);
  }
}

}  // namespace
