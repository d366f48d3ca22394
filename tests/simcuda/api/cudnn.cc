// libcudnn.so.9 on simcuda, legacy API: handles, tensor / filter / convolution descriptors, algorithm queries and
// fp32 NCHW 2-D convolutions (forward, backward data, backward filter), run as kernels launched through the driver.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <library_types.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "api/cudnn_internal.h"
#include "api/driver_client.h"
#include "api/process.h"
#include "simcuda/kernel_abi.h"

struct cudnnTensorStruct {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int nb = 0;  // 0 until set
  int dims[CUDNN_DIM_MAX] = {};
  int strides[CUDNN_DIM_MAX] = {};
};

struct cudnnFilterStruct {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  int nb = 0;
  int dims[CUDNN_DIM_MAX] = {};
};

struct cudnnConvolutionStruct {
  int spatial = 0;  // 0 until set
  int pad[CUDNN_DIM_MAX - 2] = {};
  int stride[CUDNN_DIM_MAX - 2] = {};
  int dilation[CUDNN_DIM_MAX - 2] = {};
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  int groups = 1;
  cudnnReorderType_t reorder = CUDNN_DEFAULT_REORDER;
};

namespace simcuda_cudnn {
namespace {

using simcuda::ConvGeometry;

// ---- the kernels ------------------------------------------------------------------------------------------
// Parameters: (ConvGeometry g, float alpha, float beta, const float* a, const float* b, float* out, float* ws).

template <typename T>
T Arg(const simcuda_launch* l, int i) {
  return *static_cast<const T*>(l->args[i]);
}

struct Args {
  ConvGeometry g;
  float alpha, beta;
  const float* a;
  const float* b;
  float* out;
  float* ws;
};

Args Unpack(const simcuda_launch* l) {
  return {Arg<ConvGeometry>(l, 0),    Arg<float>(l, 1),  Arg<float>(l, 2),  Arg<const float*>(l, 3),
          Arg<const float*>(l, 4),    Arg<float*>(l, 5), Arg<float*>(l, 6)};
}

// The column buffer: the workspace when the algorithm has one, else host scratch.
template <typename F>
void WithColumns(const Args& a, F run) {
  if (a.ws != nullptr) {
    run(a.ws);
    return;
  }
  std::vector<float> scratch(std::max<size_t>(1, simcuda::ConvColumnFloats(a.g)));
  run(scratch.data());
}

void ForwardBody(const simcuda_launch* l) {
  const Args a = Unpack(l);
  WithColumns(a, [&](float* col) { simcuda::ConvForward(a.g, a.alpha, a.a, a.b, a.beta, a.out, col); });
}
void BackwardDataBody(const simcuda_launch* l) {
  const Args a = Unpack(l);
  WithColumns(a, [&](float* col) { simcuda::ConvBackwardData(a.g, a.alpha, a.a, a.b, a.beta, a.out, col); });
}
void BackwardFilterBody(const simcuda_launch* l) {
  const Args a = Unpack(l);
  WithColumns(a, [&](float* col) { simcuda::ConvBackwardFilter(a.g, a.alpha, a.a, a.b, a.beta, a.out, col); });
}

size_t XBytes(const ConvGeometry& g) {
  const int64_t dims[4] = {g.n, g.c, g.h, g.w};
  return simcuda::ConvSpanBytes(dims, g.x_strides);
}
size_t YBytes(const ConvGeometry& g) {
  const int64_t dims[4] = {g.n, g.k, g.p, g.q};
  return simcuda::ConvSpanBytes(dims, g.y_strides);
}
size_t WBytes(const ConvGeometry& g) { return static_cast<size_t>(g.k * g.c * g.r * g.s) * sizeof(float); }

// Exact ranges: the two inputs, the output, the workspace; bytes count the output twice when it accumulates and
// the column buffer written and read once per image.
void Cost(const simcuda_launch* l, simcuda_cost* cost, size_t a_bytes, size_t b_bytes, size_t out_bytes) {
  const Args a = Unpack(l);
  cost->flops = simcuda::ConvFlops(a.g);
  const size_t ws = a.ws != nullptr ? ColumnWorkspaceBytes(a.g) : 0;
  cost->bytes = static_cast<double>(a_bytes + b_bytes + out_bytes * (a.beta != 0 ? 2 : 1)) +
                2.0 * static_cast<double>(ws) * static_cast<double>(a.g.n);
  simcuda_add_range(cost, a.a, a_bytes);
  simcuda_add_range(cost, a.b, b_bytes);
  simcuda_add_range(cost, a.out, out_bytes);
  if (ws != 0) simcuda_add_range(cost, a.ws, ws);
}
void ForwardCost(const simcuda_launch* l, simcuda_cost* c) {
  const ConvGeometry g = Arg<ConvGeometry>(l, 0);
  Cost(l, c, XBytes(g), WBytes(g), YBytes(g));
}
void BackwardDataCost(const simcuda_launch* l, simcuda_cost* c) {
  const ConvGeometry g = Arg<ConvGeometry>(l, 0);
  Cost(l, c, WBytes(g), YBytes(g), XBytes(g));
}
void BackwardFilterCost(const simcuda_launch* l, simcuda_cost* c) {
  const ConvGeometry g = Arg<ConvGeometry>(l, 0);
  Cost(l, c, XBytes(g), YBytes(g), WBytes(g));
}

constexpr size_t kSizes[] = {sizeof(ConvGeometry), 4, 4, 8, 8, 8, 8};
constexpr size_t kAligns[] = {alignof(ConvGeometry), 4, 4, 8, 8, 8, 8};
const simcuda_kernel kKernels[] = {
    {"simcuda_cudnn_conv_fwd", 7, kSizes, kAligns, ForwardBody, ForwardCost},
    {"simcuda_cudnn_conv_bwd_data", 7, kSizes, kAligns, BackwardDataBody, BackwardDataCost},
    {"simcuda_cudnn_conv_bwd_filter", 7, kSizes, kAligns, BackwardFilterBody, BackwardFilterCost},
};
const simcuda_module kModule = {SIMCUDA_MODULE_MAGIC, SIMCUDA_MODULE_VERSION, 3, kKernels};

const simcuda_api::DriverModule* Driver() {
  static const simcuda_api::DriverModule* driver = simcuda_api::LoadDriverModule(kModule);
  return driver;
}

}  // namespace

cudnnStatus_t MakeGeometry(const int64_t x_dims[4], const int64_t x_strides[4], const int64_t w_dims[4],
                           const int64_t y_dims[4], const int64_t y_strides[4], const int64_t pad[2],
                           const int64_t stride[2], const int64_t dilation[2], bool flip, ConvGeometry* g) {
  for (int i = 0; i < 4; ++i) {
    if (x_dims[i] <= 0 || w_dims[i] <= 0 || y_dims[i] <= 0 || x_strides[i] <= 0 || y_strides[i] <= 0) {
      return CUDNN_STATUS_BAD_PARAM;
    }
  }
  for (int i = 0; i < 2; ++i) {
    if (pad[i] < 0 || stride[i] <= 0 || dilation[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  }
  ConvGeometry r{};
  r.n = x_dims[0], r.c = x_dims[1], r.h = x_dims[2], r.w = x_dims[3];
  r.k = w_dims[0], r.r = w_dims[2], r.s = w_dims[3];
  r.pad_h = pad[0], r.pad_w = pad[1], r.stride_h = stride[0], r.stride_w = stride[1];
  r.dil_h = dilation[0], r.dil_w = dilation[1];
  r.flip = flip ? 1 : 0;
  r.p = simcuda::ConvOutputSize(r.h, r.r, r.pad_h, r.stride_h, r.dil_h);
  r.q = simcuda::ConvOutputSize(r.w, r.s, r.pad_w, r.stride_w, r.dil_w);
  if (w_dims[1] != r.c || r.p <= 0 || r.q <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (y_dims[0] != r.n || y_dims[1] != r.k || y_dims[2] != r.p || y_dims[3] != r.q) return CUDNN_STATUS_BAD_PARAM;
  std::copy(x_strides, x_strides + 4, r.x_strides);
  std::copy(y_strides, y_strides + 4, r.y_strides);
  *g = r;
  return CUDNN_STATUS_SUCCESS;
}

size_t ColumnWorkspaceBytes(const ConvGeometry& g) { return simcuda::ConvColumnFloats(g) * sizeof(float); }

float EstimatedMs(const ConvGeometry& g) {
  const simcuda::Device* d = simcuda::Global();
  if (d == nullptr) return 0;
  const auto& hw = d->config().profile;
  return static_cast<float>(1e3 * (hw.kernel_launch_s + simcuda::ConvFlops(g) / hw.flops_per_s));
}

bool KernelsReady() { return Driver() != nullptr; }

cudnnStatus_t Launch(cudnnHandle_t handle, ConvKind kind, const ConvGeometry& g, float alpha, float beta,
                     const void* a, const void* b, void* out, void* workspace) {
  const simcuda_api::DriverModule* driver = Driver();
  if (driver == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  ConvGeometry geometry = g;
  void* args[] = {&geometry, &alpha, &beta, &a, &b, &out, &workspace};
  const CUresult r = driver->launch(driver->kernels[static_cast<int>(kind)], static_cast<unsigned>(g.n),
                                    static_cast<unsigned>(g.k), 1, 256, 1, 1, 0,
                                    reinterpret_cast<CUstream>(handle->stream), args, nullptr);
  return r == CUDA_SUCCESS ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

namespace {

// ---- descriptors to a geometry --------------------------------------------------------------------------

// The legacy API's convolution: fp32 tensors of rank 4, an NCHW fp32 filter, one group, two spatial dimensions.
cudnnStatus_t Legacy(cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t conv,
                     cudnnTensorDescriptor_t y, ConvGeometry* g) {
  if (x == nullptr || w == nullptr || conv == nullptr || y == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (x->nb == 0 || w->nb == 0 || conv->spatial == 0 || y->nb == 0) return CUDNN_STATUS_BAD_PARAM;
  if (x->nb != 4 || w->nb != 4 || y->nb != 4 || conv->spatial != 2) return CUDNN_STATUS_NOT_SUPPORTED;
  if (x->type != CUDNN_DATA_FLOAT || w->type != CUDNN_DATA_FLOAT || y->type != CUDNN_DATA_FLOAT ||
      conv->compute != CUDNN_DATA_FLOAT || w->format != CUDNN_TENSOR_NCHW || conv->groups != 1) {
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  int64_t xd[4], xs[4], wd[4], yd[4], ys[4];
  for (int i = 0; i < 4; ++i) {
    xd[i] = x->dims[i], xs[i] = x->strides[i], wd[i] = w->dims[i], yd[i] = y->dims[i], ys[i] = y->strides[i];
  }
  const int64_t pad[2] = {conv->pad[0], conv->pad[1]}, stride[2] = {conv->stride[0], conv->stride[1]},
                dil[2] = {conv->dilation[0], conv->dilation[1]};
  return MakeGeometry(xd, xs, wd, yd, ys, pad, stride, dil, conv->mode == CUDNN_CONVOLUTION, g);
}

// ---- algorithms -----------------------------------------------------------------------------------------
// Every supported algorithm computes the same way (so results never depend on the choice); they differ in
// whether the column buffer lives in the caller's workspace. Heuristics and searches list the workspace one
// first, then the others, then the unsupported ones with CUDNN_STATUS_NOT_SUPPORTED.

struct Algo {
  int id;
  bool supported;
  bool workspace;
};
constexpr Algo kFwdAlgos[] = {{CUDNN_CONVOLUTION_FWD_ALGO_GEMM, true, true},
                              {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, true, false},
                              {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, true, false},
                              {CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, false, false},
                              {CUDNN_CONVOLUTION_FWD_ALGO_FFT, false, false},
                              {CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING, false, false},
                              {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, false, false},
                              {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, false, false}};
constexpr Algo kBwdDataAlgos[] = {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, true, true},
                                  {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, true, false},
                                  {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, false, false},
                                  {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING, false, false},
                                  {CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD, false, false},
                                  {CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED, false, false}};
constexpr Algo kBwdFilterAlgos[] = {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, true, true},
                                    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, true, false},
                                    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, true, false},
                                    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, false, false},
                                    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED, false, false},
                                    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING, false, false}};

template <size_t N>
const Algo* FindAlgo(const Algo (&table)[N], int id) {
  for (const Algo& a : table) {
    if (a.id == id) return &a;
  }
  return nullptr;
}

template <size_t N>
cudnnStatus_t MaxCount(cudnnHandle_t handle, int* count, const Algo (&)[N]) {
  if (handle == nullptr || count == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *count = static_cast<int>(N);
  return CUDNN_STATUS_SUCCESS;
}

// The heuristics' and searches' answer: perf[i] for the first `requested` algorithms of `table`.
template <typename Perf, typename AlgoEnum, size_t N>
cudnnStatus_t List(cudnnHandle_t handle, const Algo (&table)[N], cudnnStatus_t geometry_status,
                   const ConvGeometry& g, cudnnMathType_t math, int requested, int* returned, Perf* perf) {
  if (handle == nullptr || returned == nullptr || perf == nullptr || requested <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (geometry_status != CUDNN_STATUS_SUCCESS) return geometry_status;
  const int n = std::min<int>(requested, static_cast<int>(N));
  for (int i = 0; i < n; ++i) {
    Perf p{};
    p.algo = static_cast<AlgoEnum>(table[i].id);
    p.status = table[i].supported ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
    p.time = table[i].supported ? EstimatedMs(g) : -1.0f;
    p.memory = table[i].workspace ? ColumnWorkspaceBytes(g) : 0;
    p.determinism = CUDNN_DETERMINISTIC;
    p.mathType = math;
    perf[i] = p;
  }
  *returned = n;
  return CUDNN_STATUS_SUCCESS;
}

template <size_t N>
cudnnStatus_t WorkspaceSize(cudnnHandle_t handle, const Algo (&table)[N], int algo, cudnnStatus_t geometry_status,
                            const ConvGeometry& g, size_t* size) {
  if (handle == nullptr || size == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (geometry_status != CUDNN_STATUS_SUCCESS) return geometry_status;
  const Algo* a = FindAlgo(table, algo);
  if (a == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (!a->supported) return CUDNN_STATUS_NOT_SUPPORTED;
  *size = a->workspace ? ColumnWorkspaceBytes(g) : 0;
  return CUDNN_STATUS_SUCCESS;
}

// The three convolution calls: checks in the order cuDNN documents them, then one kernel.
template <size_t N>
cudnnStatus_t Run(cudnnHandle_t handle, ConvKind kind, const Algo (&table)[N], int algo,
                  cudnnStatus_t geometry_status, const ConvGeometry& g, const void* alpha, const void* a,
                  const void* b, const void* beta, void* out, void* workspace, size_t workspace_bytes) {
  if (handle == nullptr || alpha == nullptr || beta == nullptr || a == nullptr || b == nullptr || out == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (geometry_status != CUDNN_STATUS_SUCCESS) return geometry_status;
  const Algo* chosen = FindAlgo(table, algo);
  if (chosen == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (!chosen->supported) return CUDNN_STATUS_NOT_SUPPORTED;
  if (chosen->workspace && (workspace == nullptr || workspace_bytes < ColumnWorkspaceBytes(g))) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  // alpha and beta are host memory, read at the call.
  float fa = 0, fb = 0;
  std::memcpy(&fa, alpha, sizeof fa);
  std::memcpy(&fb, beta, sizeof fb);
  return Launch(handle, kind, g, fa, fb, a, b, out, chosen->workspace ? workspace : nullptr);
}

// ---- small helpers ----------------------------------------------------------------------------------------

template <typename T>
cudnnStatus_t Create(T** out) {
  if (out == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *out = new T;
  return CUDNN_STATUS_SUCCESS;
}

template <typename T>
cudnnStatus_t Destroy(T* p) {
  delete p;  // null is allowed, as in cuDNN
  return CUDNN_STATUS_SUCCESS;
}

size_t DataTypeBytes(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_DOUBLE: case CUDNN_DATA_INT64: case CUDNN_DATA_COMPLEX_FP32: return 8;
    case CUDNN_DATA_COMPLEX_FP64: return 16;
    case CUDNN_DATA_HALF: case CUDNN_DATA_BFLOAT16: return 2;
    case CUDNN_DATA_INT8: case CUDNN_DATA_UINT8: case CUDNN_DATA_BOOLEAN: case CUDNN_DATA_FP8_E4M3:
    case CUDNN_DATA_FP8_E5M2: case CUDNN_DATA_FP8_E8M0: return 1;
    default: return 4;
  }
}

// Packed strides of `nb` dimensions (n, c, spatial...) in a format: NCHW row-major, NHWC channels last.
void PackedStrides(cudnnTensorFormat_t format, int nb, const int* dims, int* strides) {
  int s = 1;
  if (format == CUDNN_TENSOR_NHWC && nb >= 3) {
    strides[1] = s;
    s *= dims[1];
    for (int i = nb - 1; i >= 2; --i) {
      strides[i] = s;
      s *= dims[i];
    }
    strides[0] = s;
    return;
  }
  for (int i = nb - 1; i >= 0; --i) {
    strides[i] = s;
    s *= dims[i];
  }
}

cudnnStatus_t SetTensor(cudnnTensorDescriptor_t d, cudnnDataType_t type, int nb, const int* dims, const int* strides) {
  if (d == nullptr || dims == nullptr || strides == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (nb < 3 || nb > CUDNN_DIM_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < nb; ++i) {
    if (dims[i] <= 0 || strides[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  }
  d->type = type;
  d->nb = nb;
  std::copy(dims, dims + nb, d->dims);
  std::copy(strides, strides + nb, d->strides);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t SetFilter(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format, int nb,
                        const int* dims) {
  if (d == nullptr || dims == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (nb < 3 || nb > CUDNN_DIM_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) return CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < nb; ++i) {
    if (dims[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  }
  d->type = type;
  d->format = format;
  d->nb = nb;
  std::copy(dims, dims + nb, d->dims);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t SetConv(cudnnConvolutionDescriptor_t d, int spatial, const int* pad, const int* stride,
                      const int* dilation, cudnnConvolutionMode_t mode, cudnnDataType_t compute) {
  if (d == nullptr || pad == nullptr || stride == nullptr || dilation == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (spatial < 1 || spatial > CUDNN_DIM_MAX - 2) return CUDNN_STATUS_NOT_SUPPORTED;
  if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < spatial; ++i) {
    if (pad[i] < 0 || stride[i] <= 0 || dilation[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  }
  d->spatial = spatial;
  std::copy(pad, pad + spatial, d->pad);
  std::copy(stride, stride + spatial, d->stride);
  std::copy(dilation, dilation + spatial, d->dilation);
  d->mode = mode;
  d->compute = compute;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace
}  // namespace simcuda_cudnn

using simcuda_cudnn::ConvGeometry;
using simcuda_cudnn::ConvKind;

extern "C" {

// ---- library, handles ----------------------------------------------------------------------------------

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
size_t cudnnGetMaxDeviceVersion(void) { return CUDNN_MAX_DEVICE_VERSION; }
size_t cudnnGetCudartVersion(void) { return CUDART_VERSION; }

cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUDNN_STATUS_BAD_PARAM;
  switch (type) {
    case MAJOR_VERSION: *value = CUDNN_MAJOR; return CUDNN_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUDNN_MINOR; return CUDNN_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUDNN_PATCHLEVEL; return CUDNN_STATUS_SUCCESS;
    default: return CUDNN_STATUS_BAD_PARAM;
  }
}

// The sub-libraries' version checks: simcuda is one library, always consistent with itself.
cudnnStatus_t cudnnGraphVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnOpsVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnCnnVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnAdvVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED: return "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED";
    case CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND: return "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND";
    case CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH: return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE: return "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE";
    case CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE: return "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN: return "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN";
    case CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE: return "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_UNKNOWN";
  }
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message != nullptr && max_size > 0) message[0] = '\0';  // simcuda keeps no error log
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (!simcuda_cudnn::KernelsReady()) return CUDNN_STATUS_NOT_INITIALIZED;
  *handle = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr || stream == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *stream = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

// ---- tensor descriptors ---------------------------------------------------------------------------------

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) { return simcuda_cudnn::Create(d); }
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { return simcuda_cudnn::Destroy(d); }

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) return CUDNN_STATUS_NOT_SUPPORTED;
  const int dims[4] = {n, c, h, w};
  int strides[4];
  simcuda_cudnn::PackedStrides(format, 4, dims, strides);
  return simcuda_cudnn::SetTensor(d, type, 4, dims, strides);
}

cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t d, cudnnDataType_t type, int n, int c, int h,
                                           int w, int nStride, int cStride, int hStride, int wStride) {
  const int dims[4] = {n, c, h, w}, strides[4] = {nStride, cStride, hStride, wStride};
  return simcuda_cudnn::SetTensor(d, type, 4, dims, strides);
}

cudnnStatus_t cudnnGetTensor4dDescriptor(const cudnnTensorDescriptor_t d, cudnnDataType_t* type, int* n, int* c,
                                         int* h, int* w, int* nStride, int* cStride, int* hStride, int* wStride) {
  if (d == nullptr || d->nb != 4) return CUDNN_STATUS_BAD_PARAM;
  int* dims[4] = {n, c, h, w};
  int* strides[4] = {nStride, cStride, hStride, wStride};
  for (int i = 0; i < 4; ++i) {
    if (dims[i] == nullptr || strides[i] == nullptr) return CUDNN_STATUS_BAD_PARAM;
  }
  if (type == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *type = d->type;
  for (int i = 0; i < 4; ++i) *dims[i] = d->dims[i], *strides[i] = d->strides[i];
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d, cudnnDataType_t type, int nb, const int dims[],
                                         const int strides[]) {
  return simcuda_cudnn::SetTensor(d, type, nb, dims, strides);
}

cudnnStatus_t cudnnSetTensorNdDescriptorEx(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                           cudnnDataType_t type, int nb, const int dims[]) {
  if (dims == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (nb < 3 || nb > CUDNN_DIM_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) return CUDNN_STATUS_NOT_SUPPORTED;
  int strides[CUDNN_DIM_MAX];
  simcuda_cudnn::PackedStrides(format, nb, dims, strides);
  return simcuda_cudnn::SetTensor(d, type, nb, dims, strides);
}

cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t d, int requested, cudnnDataType_t* type,
                                         int* nb, int dims[], int strides[]) {
  if (d == nullptr || type == nullptr || nb == nullptr || requested < 0) return CUDNN_STATUS_BAD_PARAM;
  const int n = std::min(requested, d->nb);
  if (n > 0 && (dims == nullptr || strides == nullptr)) return CUDNN_STATUS_BAD_PARAM;
  *type = d->type;
  *nb = d->nb;
  std::copy(d->dims, d->dims + n, dims);
  std::copy(d->strides, d->strides + n, strides);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetTensorSizeInBytes(const cudnnTensorDescriptor_t d, size_t* size) {
  if (d == nullptr || size == nullptr || d->nb == 0) return CUDNN_STATUS_BAD_PARAM;
  size_t last = 0;
  for (int i = 0; i < d->nb; ++i) last += static_cast<size_t>(d->dims[i] - 1) * static_cast<size_t>(d->strides[i]);
  *size = (last + 1) * simcuda_cudnn::DataTypeBytes(d->type);
  return CUDNN_STATUS_SUCCESS;
}

// ---- filter descriptors ---------------------------------------------------------------------------------

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) { return simcuda_cudnn::Create(d); }
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { return simcuda_cudnn::Destroy(d); }

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  const int dims[4] = {k, c, h, w};
  return simcuda_cudnn::SetFilter(d, type, format, 4, dims);
}

cudnnStatus_t cudnnGetFilter4dDescriptor(const cudnnFilterDescriptor_t d, cudnnDataType_t* type,
                                         cudnnTensorFormat_t* format, int* k, int* c, int* h, int* w) {
  if (d == nullptr || d->nb != 4 || type == nullptr || format == nullptr || k == nullptr || c == nullptr ||
      h == nullptr || w == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *type = d->type;
  *format = d->format;
  *k = d->dims[0], *c = d->dims[1], *h = d->dims[2], *w = d->dims[3];
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int nb, const int dims[]) {
  return simcuda_cudnn::SetFilter(d, type, format, nb, dims);
}

cudnnStatus_t cudnnGetFilterNdDescriptor(const cudnnFilterDescriptor_t d, int requested, cudnnDataType_t* type,
                                         cudnnTensorFormat_t* format, int* nb, int dims[]) {
  if (d == nullptr || type == nullptr || format == nullptr || nb == nullptr || requested < 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const int n = std::min(requested, d->nb);
  if (n > 0 && dims == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *type = d->type;
  *format = d->format;
  *nb = d->nb;
  std::copy(d->dims, d->dims + n, dims);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetFilterSizeInBytes(const cudnnFilterDescriptor_t d, size_t* size) {
  if (d == nullptr || size == nullptr || d->nb == 0) return CUDNN_STATUS_BAD_PARAM;
  size_t n = 1;
  for (int i = 0; i < d->nb; ++i) n *= static_cast<size_t>(d->dims[i]);
  *size = n * simcuda_cudnn::DataTypeBytes(d->type);
  return CUDNN_STATUS_SUCCESS;
}

// ---- convolution descriptors ----------------------------------------------------------------------------

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  return simcuda_cudnn::Create(d);
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  return simcuda_cudnn::Destroy(d);
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  const int pad[2] = {pad_h, pad_w}, stride[2] = {u, v}, dil[2] = {dilation_h, dilation_w};
  return simcuda_cudnn::SetConv(d, 2, pad, stride, dil, mode, compute);
}

cudnnStatus_t cudnnGetConvolution2dDescriptor(const cudnnConvolutionDescriptor_t d, int* pad_h, int* pad_w, int* u,
                                              int* v, int* dilation_h, int* dilation_w,
                                              cudnnConvolutionMode_t* mode, cudnnDataType_t* compute) {
  if (d == nullptr || d->spatial != 2 || pad_h == nullptr || pad_w == nullptr || u == nullptr || v == nullptr ||
      dilation_h == nullptr || dilation_w == nullptr || mode == nullptr || compute == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *pad_h = d->pad[0], *pad_w = d->pad[1], *u = d->stride[0], *v = d->stride[1];
  *dilation_h = d->dilation[0], *dilation_w = d->dilation[1];
  *mode = d->mode;
  *compute = d->compute;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t d, int length, const int pad[],
                                              const int stride[], const int dilation[], cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  return simcuda_cudnn::SetConv(d, length, pad, stride, dilation, mode, compute);
}

cudnnStatus_t cudnnGetConvolutionNdDescriptor(const cudnnConvolutionDescriptor_t d, int requested, int* length,
                                              int pad[], int stride[], int dilation[],
                                              cudnnConvolutionMode_t* mode, cudnnDataType_t* compute) {
  if (d == nullptr || length == nullptr || mode == nullptr || compute == nullptr || requested < 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const int n = std::min(requested, d->spatial);
  if (n > 0 && (pad == nullptr || stride == nullptr || dilation == nullptr)) return CUDNN_STATUS_BAD_PARAM;
  *length = d->spatial;
  std::copy(d->pad, d->pad + n, pad);
  std::copy(d->stride, d->stride + n, stride);
  std::copy(d->dilation, d->dilation + n, dilation);
  *mode = d->mode;
  *compute = d->compute;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM;
  d->math = math;  // fp32 results are computed the same way in every mode
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t* math) {
  if (d == nullptr || math == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *math = d->math;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
  if (d == nullptr || groups < 1) return CUDNN_STATUS_BAD_PARAM;
  d->groups = groups;  // accepted; the convolutions refuse more than one group
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int* groups) {
  if (d == nullptr || groups == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *groups = d->groups;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionReorderType(cudnnConvolutionDescriptor_t d, cudnnReorderType_t reorder) {
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM;
  d->reorder = reorder;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionReorderType(cudnnConvolutionDescriptor_t d, cudnnReorderType_t* reorder) {
  if (d == nullptr || reorder == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *reorder = d->reorder;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(const cudnnConvolutionDescriptor_t conv,
                                                    const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                                                    int nb, int out[]) {
  if (conv == nullptr || x == nullptr || w == nullptr || out == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (x->nb == 0 || w->nb != x->nb || conv->spatial != x->nb - 2 || nb != x->nb) return CUDNN_STATUS_BAD_PARAM;
  if (w->dims[1] * conv->groups != x->dims[1]) return CUDNN_STATUS_BAD_PARAM;
  int dims[CUDNN_DIM_MAX] = {x->dims[0], w->dims[0]};
  for (int i = 0; i < conv->spatial; ++i) {
    const int64_t o = simcuda::ConvOutputSize(x->dims[2 + i], w->dims[2 + i], conv->pad[i], conv->stride[i],
                                              conv->dilation[i]);
    if (o <= 0) return CUDNN_STATUS_BAD_PARAM;
    dims[2 + i] = static_cast<int>(o);
  }
  std::copy(dims, dims + nb, out);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t conv,
                                                    const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                                                    int* n, int* c, int* h, int* w_out) {
  if (n == nullptr || c == nullptr || h == nullptr || w_out == nullptr) return CUDNN_STATUS_BAD_PARAM;
  int dims[4];
  const cudnnStatus_t s = cudnnGetConvolutionNdForwardOutputDim(conv, x, w, 4, dims);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  *n = dims[0], *c = dims[1], *h = dims[2], *w_out = dims[3];
  return CUDNN_STATUS_SUCCESS;
}

// ---- algorithms and workspaces --------------------------------------------------------------------------

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return simcuda_cudnn::MaxCount(handle, count, simcuda_cudnn::kFwdAlgos);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return simcuda_cudnn::MaxCount(handle, count, simcuda_cudnn::kBwdDataAlgos);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return simcuda_cudnn::MaxCount(handle, count, simcuda_cudnn::kBwdFilterAlgos);
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t conv,
                                                     const cudnnTensorDescriptor_t y, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
  ConvGeometry g{};
  const cudnnStatus_t s = simcuda_cudnn::Legacy(x, w, conv, y, &g);
  return simcuda_cudnn::List<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      handle, simcuda_cudnn::kFwdAlgos, s, g, conv != nullptr ? conv->math : CUDNN_DEFAULT_MATH, requested,
      returned, perf);
}

// The searches report the same list as the heuristics: every algorithm computes identically and the estimated
// virtual time is the same for all, so there is nothing to measure.
cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                   const cudnnFilterDescriptor_t w,
                                                   const cudnnConvolutionDescriptor_t conv,
                                                   const cudnnTensorDescriptor_t y, const int requested,
                                                   int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
  return cudnnGetConvolutionForwardAlgorithm_v7(handle, x, w, conv, y, requested, returned, perf);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                     const void*, const cudnnFilterDescriptor_t w, const void*,
                                                     const cudnnConvolutionDescriptor_t conv,
                                                     const cudnnTensorDescriptor_t y, void*, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* perf, void*,
                                                     size_t) {
  return cudnnGetConvolutionForwardAlgorithm_v7(handle, x, w, conv, y, requested, returned, perf);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t conv,
                                                      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
                                                      size_t* size) {
  ConvGeometry g{};
  const cudnnStatus_t s = simcuda_cudnn::Legacy(x, w, conv, y, &g);
  return simcuda_cudnn::WorkspaceSize(handle, simcuda_cudnn::kFwdAlgos, algo, s, g, size);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnTensorDescriptor_t dx, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  ConvGeometry g{};
  const cudnnStatus_t s = simcuda_cudnn::Legacy(dx, w, conv, dy, &g);
  return simcuda_cudnn::List<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      handle, simcuda_cudnn::kBwdDataAlgos, s, g, conv != nullptr ? conv->math : CUDNN_DEFAULT_MATH, requested,
      returned, perf);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                        const cudnnTensorDescriptor_t dy,
                                                        const cudnnConvolutionDescriptor_t conv,
                                                        const cudnnTensorDescriptor_t dx, const int requested,
                                                        int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  return cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w, dy, conv, dx, requested, returned, perf);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                          const void*, const cudnnTensorDescriptor_t dy, const void*,
                                                          const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnTensorDescriptor_t dx, void*,
                                                          const int requested, int* returned,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* perf, void*, size_t) {
  return cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w, dy, conv, dx, requested, returned, perf);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t conv,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* size) {
  ConvGeometry g{};
  const cudnnStatus_t s = simcuda_cudnn::Legacy(dx, w, conv, dy, &g);
  return simcuda_cudnn::WorkspaceSize(handle, simcuda_cudnn::kBwdDataAlgos, algo, s, g, size);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t conv,
                                                            const cudnnFilterDescriptor_t dw, const int requested,
                                                            int* returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  ConvGeometry g{};
  const cudnnStatus_t s = simcuda_cudnn::Legacy(x, dw, conv, dy, &g);
  return simcuda_cudnn::List<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      handle, simcuda_cudnn::kBwdFilterAlgos, s, g, conv != nullptr ? conv->math : CUDNN_DEFAULT_MATH, requested,
      returned, perf);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnFilterDescriptor_t dw, const int requested,
                                                          int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  return cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, x, dy, conv, dw, requested, returned, perf);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                            const void*, const cudnnTensorDescriptor_t dy,
                                                            const void*, const cudnnConvolutionDescriptor_t conv,
                                                            const cudnnFilterDescriptor_t dw, void*,
                                                            const int requested, int* returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perf, void*,
                                                            size_t) {
  return cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, x, dy, conv, dw, requested, returned, perf);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                             const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t conv,
                                                             const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t* size) {
  ConvGeometry g{};
  const cudnnStatus_t s = simcuda_cudnn::Legacy(x, dw, conv, dy, &g);
  return simcuda_cudnn::WorkspaceSize(handle, simcuda_cudnn::kBwdFilterAlgos, algo, s, g, size);
}

// ---- the convolutions -----------------------------------------------------------------------------------

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xDesc,
                                      const void* x, const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
                                      void* workSpace, size_t workSpaceSizeInBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  ConvGeometry g{};
  const cudnnStatus_t s = simcuda_cudnn::Legacy(xDesc, wDesc, convDesc, yDesc, &g);
  return simcuda_cudnn::Run(handle, ConvKind::kForward, simcuda_cudnn::kFwdAlgos, algo, s, g, alpha, x, w, beta, y,
                            workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha, const cudnnFilterDescriptor_t wDesc,
                                           const void* w, const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                           size_t workSpaceSizeInBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  ConvGeometry g{};
  const cudnnStatus_t s = simcuda_cudnn::Legacy(dxDesc, wDesc, convDesc, dyDesc, &g);
  return simcuda_cudnn::Run(handle, ConvKind::kBackwardData, simcuda_cudnn::kBwdDataAlgos, algo, s, g, alpha, w, dy,
                            beta, dx, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                             size_t workSpaceSizeInBytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  ConvGeometry g{};
  const cudnnStatus_t s = simcuda_cudnn::Legacy(xDesc, dwDesc, convDesc, dyDesc, &g);
  return simcuda_cudnn::Run(handle, ConvKind::kBackwardFilter, simcuda_cudnn::kBwdFilterAlgos, algo, s, g, alpha, x,
                            dy, beta, dw, workSpace, workSpaceSizeInBytes);
}

}  // extern "C"
