// cuBLAS / cuDNN operand sets.
#include "runtime/observe/library_ops.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

namespace karma::rt {
namespace {

bool AllZero(const void* p, int bytes) {
  if (p == nullptr || bytes <= 0) return false;
  const auto* b = static_cast<const unsigned char*>(p);
  for (int i = 0; i < bytes; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

bool IsComplex(cudaDataType t) {
  return t == CUDA_C_16F || t == CUDA_C_32F || t == CUDA_C_64F || t == CUDA_C_16BF || t == CUDA_C_8I ||
         t == CUDA_C_32I;
}

}  // namespace

int DataTypeBytes(cudaDataType t) {
  switch (t) {
    case CUDA_R_64F: return 8;
    case CUDA_R_32F: return 4;
    case CUDA_R_16F: case CUDA_R_16BF: return 2;
    case CUDA_R_8I: case CUDA_R_8U: case CUDA_R_8F_E4M3: case CUDA_R_8F_E5M2: return 1;
    case CUDA_R_32I: case CUDA_R_32U: return 4;
    case CUDA_C_32F: return 8;
    case CUDA_C_64F: return 16;
    case CUDA_C_16F: case CUDA_C_16BF: return 4;
    default: return 0;
  }
}

const char* DataTypeName(cudaDataType t) {
  switch (t) {
    case CUDA_R_64F: return "float64";
    case CUDA_R_32F: return "float32";
    case CUDA_R_16F: return "float16";
    case CUDA_R_16BF: return "bfloat16";
    case CUDA_R_8I: return "int8";
    case CUDA_R_8U: return "uint8";
    case CUDA_R_32I: return "int32";
    case CUDA_R_8F_E4M3: return "float8_e4m3";
    case CUDA_R_8F_E5M2: return "float8_e5m2";
    case CUDA_C_32F: return "complex64";
    case CUDA_C_64F: return "complex128";
    default: return nullptr;
  }
}

int GemmScaleBytes(cublasComputeType_t compute, cudaDataType c_type) {
  switch (compute) {
    case CUBLAS_COMPUTE_16F: case CUBLAS_COMPUTE_16F_PEDANTIC: return 2;
    case CUBLAS_COMPUTE_32F: case CUBLAS_COMPUTE_32F_PEDANTIC: case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF: case CUBLAS_COMPUTE_32F_FAST_TF32:
      return IsComplex(c_type) ? 8 : 4;
    case CUBLAS_COMPUTE_64F: case CUBLAS_COMPUTE_64F_PEDANTIC: return IsComplex(c_type) ? 16 : 8;
    case CUBLAS_COMPUTE_32I: case CUBLAS_COMPUTE_32I_PEDANTIC: return 4;
    default: return 0;
  }
}

OpDesc GemmOp(const char* name, const GemmShape& g, const GemmContext& c, const void* A, const void* B, void* C,
              const void* alpha, const void* beta, cudaDataType a_type, cudaDataType b_type, cudaDataType c_type) {
  OpDesc d;
  d.kind = trace::OpKind::kLibrary;
  d.name = name;
  d.stream = c.stream;
  const bool beta_zero = !c.scalars_on_device && AllZero(beta, c.scale_bytes);
  // Column-major: a rows x cols matrix with leading dimension ld spans ld * (cols - 1) + rows elements; a strided
  // batch adds stride * (batch - 1). 0 (unknown) for shapes that make no sense or negative strides.
  auto extent = [&](int rows, int cols, int ld, int64_t stride, int elem) -> uint64_t {
    if (rows <= 0 || cols <= 0 || ld < rows || elem <= 0 || stride < 0 || g.batch < 1) return 0;
    const uint64_t one = static_cast<uint64_t>(ld) * static_cast<uint64_t>(cols - 1) + static_cast<uint64_t>(rows);
    return (one + static_cast<uint64_t>(stride) * static_cast<uint64_t>(g.batch - 1)) * static_cast<uint64_t>(elem);
  };
  // Dense: the matrices' elements fill the extent (ld equals the rows, a strided batch packs them back to back).
  auto dense = [&](int rows, int cols, int ld, int64_t stride) {
    return ld == rows && (g.batch <= 1 || stride == static_cast<int64_t>(ld) * cols);
  };
  const int a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  const int b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  d.operands.push_back({AddressOf(A), Access::kRead, false,
                        extent(a_rows, a_cols, g.lda, g.stride_a, DataTypeBytes(a_type)),
                        !dense(a_rows, a_cols, g.lda, g.stride_a)});
  d.operands.push_back({AddressOf(B), Access::kRead, false,
                        extent(b_rows, b_cols, g.ldb, g.stride_b, DataTypeBytes(b_type)),
                        !dense(b_rows, b_cols, g.ldb, g.stride_b)});
  const bool dense_c = dense(g.m, g.n, g.ldc, g.stride_c);
  d.operands.push_back({AddressOf(C), beta_zero ? Access::kWrite : Access::kReadWrite, false,
                        extent(g.m, g.n, g.ldc, g.stride_c, DataTypeBytes(c_type)), !dense_c});
  if (c.scalars_on_device) {
    d.operands.push_back({AddressOf(alpha), Access::kRead, false});
    d.operands.push_back({AddressOf(beta), Access::kRead, false});
  }
  const auto m = static_cast<uint64_t>(g.m > 0 ? g.m : 0), n = static_cast<uint64_t>(g.n > 0 ? g.n : 0),
             k = static_cast<uint64_t>(g.k > 0 ? g.k : 0), batch = static_cast<uint64_t>(g.batch > 0 ? g.batch : 0);
  d.flops = 2 * m * n * k * batch;
  d.bytes = batch * (static_cast<uint64_t>(DataTypeBytes(a_type)) * m * k +
                     static_cast<uint64_t>(DataTypeBytes(b_type)) * k * n +
                     static_cast<uint64_t>(DataTypeBytes(c_type)) * m * n * (beta_zero ? 1 : 2));
  d.dtype = DataTypeName(a_type);
  uint64_t h = kHashSeed;
  for (int v : {g.m, g.n, g.k, g.batch, g.trans_a ? 1 : 0, g.trans_b ? 1 : 0, g.lda, g.ldb, g.ldc,
                static_cast<int>(a_type), static_cast<int>(c_type)}) {
    h = HashMix(h, static_cast<uint64_t>(static_cast<uint32_t>(v)));
  }
  d.shape = h;
  return d;
}

bool CudnnBetaIsZero(const void* beta, int data_type) {
  if (data_type < 0) return false;
  return AllZero(beta, CudnnScalingBytes(data_type));
}

int CudnnTensorType(const CudaApi& api, cudnnTensorDescriptor_t desc) {
  if (api.cudnnGetTensorNdDescriptor == nullptr || desc == nullptr) return -1;
  cudnnDataType_t t;
  int nb = 0, dims[CUDNN_DIM_MAX], strides[CUDNN_DIM_MAX];
  if (api.cudnnGetTensorNdDescriptor(desc, CUDNN_DIM_MAX, &t, &nb, dims, strides) != CUDNN_STATUS_SUCCESS) return -1;
  return static_cast<int>(t);
}

bool ConvDescriptors::CopyTensor(const CudaApi& api, cudnnTensorDescriptor_t from, cudnnTensorDescriptor_t* to) {
  cudnnDataType_t t;
  int nb = 0, dims[CUDNN_DIM_MAX], strides[CUDNN_DIM_MAX];
  return api.cudnnGetTensorNdDescriptor(from, CUDNN_DIM_MAX, &t, &nb, dims, strides) == CUDNN_STATUS_SUCCESS &&
         api.cudnnCreateTensorDescriptor(to) == CUDNN_STATUS_SUCCESS &&
         api.cudnnSetTensorNdDescriptor(*to, t, nb, dims, strides) == CUDNN_STATUS_SUCCESS;
}

std::shared_ptr<const ConvDescriptors> ConvDescriptors::Copy(const CudaApi& api, cudnnTensorDescriptor_t x,
                                                             cudnnFilterDescriptor_t w,
                                                             cudnnConvolutionDescriptor_t conv,
                                                             cudnnTensorDescriptor_t y) {
  const bool have = api.cudnnGetTensorNdDescriptor && api.cudnnCreateTensorDescriptor &&
                    api.cudnnSetTensorNdDescriptor && api.cudnnDestroyTensorDescriptor &&
                    api.cudnnGetFilterNdDescriptor && api.cudnnCreateFilterDescriptor &&
                    api.cudnnSetFilterNdDescriptor && api.cudnnDestroyFilterDescriptor &&
                    api.cudnnGetConvolutionNdDescriptor && api.cudnnCreateConvolutionDescriptor &&
                    api.cudnnSetConvolutionNdDescriptor && api.cudnnDestroyConvolutionDescriptor &&
                    api.cudnnGetConvolutionMathType && api.cudnnSetConvolutionMathType &&
                    api.cudnnGetConvolutionGroupCount && api.cudnnSetConvolutionGroupCount;
  if (!have || x == nullptr || w == nullptr || conv == nullptr || y == nullptr) return nullptr;
  std::shared_ptr<ConvDescriptors> c(new ConvDescriptors());  // its destructor frees what was made
  c->destroy_tensor_ = api.cudnnDestroyTensorDescriptor;
  c->destroy_filter_ = api.cudnnDestroyFilterDescriptor;
  c->destroy_conv_ = api.cudnnDestroyConvolutionDescriptor;
  if (!c->CopyTensor(api, x, &c->x) || !c->CopyTensor(api, y, &c->y)) return nullptr;

  cudnnDataType_t t;
  cudnnTensorFormat_t format;
  int nb = 0, dims[CUDNN_DIM_MAX];
  if (api.cudnnGetFilterNdDescriptor(w, CUDNN_DIM_MAX, &t, &format, &nb, dims) != CUDNN_STATUS_SUCCESS ||
      api.cudnnCreateFilterDescriptor(&c->w) != CUDNN_STATUS_SUCCESS ||
      api.cudnnSetFilterNdDescriptor(c->w, t, format, nb, dims) != CUDNN_STATUS_SUCCESS) {
    return nullptr;
  }

  int length = 0, pad[CUDNN_DIM_MAX], stride[CUDNN_DIM_MAX], dilation[CUDNN_DIM_MAX], groups = 1;
  cudnnConvolutionMode_t mode;
  cudnnDataType_t compute;
  cudnnMathType_t math;
  if (api.cudnnGetConvolutionNdDescriptor(conv, CUDNN_DIM_MAX, &length, pad, stride, dilation, &mode, &compute) !=
          CUDNN_STATUS_SUCCESS ||
      api.cudnnGetConvolutionMathType(conv, &math) != CUDNN_STATUS_SUCCESS ||
      api.cudnnGetConvolutionGroupCount(conv, &groups) != CUDNN_STATUS_SUCCESS ||
      api.cudnnCreateConvolutionDescriptor(&c->conv) != CUDNN_STATUS_SUCCESS ||
      api.cudnnSetConvolutionNdDescriptor(c->conv, length, pad, stride, dilation, mode, compute) !=
          CUDNN_STATUS_SUCCESS ||
      api.cudnnSetConvolutionMathType(c->conv, math) != CUDNN_STATUS_SUCCESS ||
      api.cudnnSetConvolutionGroupCount(c->conv, groups) != CUDNN_STATUS_SUCCESS) {
    return nullptr;
  }
  return c;
}

ConvDescriptors::~ConvDescriptors() {
  if (x != nullptr) destroy_tensor_(x);
  if (y != nullptr) destroy_tensor_(y);
  if (w != nullptr) destroy_filter_(w);
  if (conv != nullptr) destroy_conv_(conv);
}

int CudnnFilterType(const CudaApi& api, cudnnFilterDescriptor_t desc) {
  if (api.cudnnGetFilterNdDescriptor == nullptr || desc == nullptr) return -1;
  cudnnDataType_t t;
  cudnnTensorFormat_t format;
  int nb = 0, dims[CUDNN_DIM_MAX];
  if (api.cudnnGetFilterNdDescriptor(desc, CUDNN_DIM_MAX, &t, &format, &nb, dims) != CUDNN_STATUS_SUCCESS) return -1;
  return static_cast<int>(t);
}

OpDesc ConvOp(const char* name, StreamKey stream, std::initializer_list<const void*> inputs, void* output,
              bool accumulate, void* workspace, size_t workspace_bytes, uint64_t shape) {
  OpDesc d;
  d.kind = trace::OpKind::kLibrary;
  d.name = name;
  d.stream = stream;
  for (const void* in : inputs) d.operands.push_back({AddressOf(in), Access::kRead, false});
  d.operands.push_back({AddressOf(output), accumulate ? Access::kReadWrite : Access::kWrite, false});
  if (workspace != nullptr && workspace_bytes != 0) d.operands.push_back({AddressOf(workspace), Access::kReadWrite, true});
  d.shape = shape;
  return d;
}

namespace {

int CudnnTypeBytes(int t) {
  switch (t) {
    case CUDNN_DATA_DOUBLE: case CUDNN_DATA_INT64: return 8;
    case CUDNN_DATA_HALF: case CUDNN_DATA_BFLOAT16: return 2;
    case CUDNN_DATA_INT8: case CUDNN_DATA_UINT8: case CUDNN_DATA_BOOLEAN: case CUDNN_DATA_FP8_E4M3:
    case CUDNN_DATA_FP8_E5M2: return 1;
    default: return 4;
  }
}

const char* CudnnTypeName(int t) {
  switch (t) {
    case CUDNN_DATA_FLOAT: return "float32";
    case CUDNN_DATA_DOUBLE: return "float64";
    case CUDNN_DATA_HALF: return "float16";
    case CUDNN_DATA_BFLOAT16: return "bfloat16";
    case CUDNN_DATA_INT8: return "int8";
    case CUDNN_DATA_UINT8: return "uint8";
    case CUDNN_DATA_INT32: return "int32";
    default: return nullptr;
  }
}

uint64_t Elements(const int64_t* dims, int n) {
  uint64_t e = 1;
  for (int i = 0; i < n; ++i) e *= static_cast<uint64_t>(dims[i] > 0 ? dims[i] : 0);
  return e;
}

// One tensor of a convolution: elements, the output channels when it is the filter, bytes per element, and where
// its bytes lie.
struct ConvTensor {
  uint64_t elements = 0;
  uint64_t leading = 1;  // dims[0]
  int type = -1;
  uint64_t span = 0;  // bytes from the first element to past the last; 0: unknown
  bool gaps = false;  // the span has bytes no element occupies (padding between rows or images), or strides overlap
};

ConvTensor MakeTensor(const int64_t* dims, const int64_t* strides, int n, int type) {
  ConvTensor t{Elements(dims, n), n > 0 && dims[0] > 0 ? static_cast<uint64_t>(dims[0]) : 0, type};
  if (t.elements == 0) return t;
  // Without strides the layout is packed. A negative stride leaves the span unknown.
  uint64_t elements = t.elements;
  if (strides != nullptr) {
    uint64_t last = 0;
    for (int i = 0; i < n; ++i) {
      if (strides[i] < 0) return t;
      last += static_cast<uint64_t>(dims[i] - 1) * static_cast<uint64_t>(strides[i]);
    }
    elements = last + 1;
  }
  t.span = elements * static_cast<uint64_t>(CudnnTypeBytes(type));
  t.gaps = elements != t.elements;
  return t;
}

// Gives the operand at `ptr` the tensor's extent; a write without gaps writes every byte of it.
void StateExtent(OpDesc* d, const void* ptr, const ConvTensor& t) {
  if (t.span == 0 || ptr == nullptr) return;
  for (Operand& o : d->operands) {
    if (o.ptr != AddressOf(ptr) || o.workspace) continue;
    o.bytes = t.span;
    o.gaps = t.gaps;
  }
}

// A convolution's work from its three tensors (x-shaped, filter, y-shaped) and which one it writes.
void AddConvWork(const ConvTensor (&t)[3], int output, bool accumulate, OpDesc* d) {
  if (t[1].leading == 0) return;
  d->flops += 2 * t[2].elements * (t[1].elements / t[1].leading);
  uint64_t bytes = 0;
  for (const ConvTensor& x : t) bytes += x.elements * static_cast<uint64_t>(CudnnTypeBytes(x.type));
  if (accumulate) bytes += t[output].elements * static_cast<uint64_t>(CudnnTypeBytes(t[output].type));
  d->bytes += bytes;
  d->dtype = CudnnTypeName(t[2].type);
}

bool ReadTensor(const CudaApi& api, cudnnTensorDescriptor_t desc, ConvTensor* out) {
  if (api.cudnnGetTensorNdDescriptor == nullptr || desc == nullptr) return false;
  cudnnDataType_t t;
  int nb = 0, dims[CUDNN_DIM_MAX], strides[CUDNN_DIM_MAX];
  if (api.cudnnGetTensorNdDescriptor(desc, CUDNN_DIM_MAX, &t, &nb, dims, strides) != CUDNN_STATUS_SUCCESS) return false;
  nb = std::clamp(nb, 0, CUDNN_DIM_MAX);
  int64_t d64[CUDNN_DIM_MAX], s64[CUDNN_DIM_MAX];
  for (int i = 0; i < nb; ++i) {
    d64[i] = dims[i];
    s64[i] = strides[i];
  }
  *out = MakeTensor(d64, s64, nb, static_cast<int>(t));
  return true;
}

bool ReadFilter(const CudaApi& api, cudnnFilterDescriptor_t desc, ConvTensor* out) {
  if (api.cudnnGetFilterNdDescriptor == nullptr || desc == nullptr) return false;
  cudnnDataType_t t;
  cudnnTensorFormat_t format;
  int nb = 0, dims[CUDNN_DIM_MAX];
  if (api.cudnnGetFilterNdDescriptor(desc, CUDNN_DIM_MAX, &t, &format, &nb, dims) != CUDNN_STATUS_SUCCESS) {
    return false;
  }
  nb = std::clamp(nb, 0, CUDNN_DIM_MAX);
  int64_t d64[CUDNN_DIM_MAX];
  for (int i = 0; i < nb; ++i) d64[i] = dims[i];
  *out = MakeTensor(d64, nullptr, nb, static_cast<int>(t));  // a filter is packed (NCHW or NHWC)
  return true;
}

// Descriptors the session creates to read a graph back, destroyed with this object.
class Scratch {
 public:
  explicit Scratch(const CudaApi& api) : api_(api) {}
  ~Scratch() {
    for (cudnnBackendDescriptor_t d : owned_) api_.cudnnBackendDestroyDescriptor(d);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  cudnnBackendDescriptor_t Make(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    if (api_.cudnnBackendCreateDescriptor(type, &d) != CUDNN_STATUS_SUCCESS || d == nullptr) return nullptr;
    owned_.push_back(d);
    return d;
  }
  // The descriptor attribute `name` of `from` (its first element), copied into a new descriptor of `type`.
  cudnnBackendDescriptor_t Child(cudnnBackendDescriptor_t from, cudnnBackendAttributeName_t name,
                                 cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = Make(type);
    int64_t n = 0;
    if (d == nullptr ||
        api_.cudnnBackendGetAttribute(from, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &d) != CUDNN_STATUS_SUCCESS ||
        n < 1) {
      return nullptr;
    }
    return d;
  }
  bool Int64(cudnnBackendDescriptor_t from, cudnnBackendAttributeName_t name, int64_t max, int64_t* count,
             int64_t* out) {
    return api_.cudnnBackendGetAttribute(from, name, CUDNN_TYPE_INT64, max, count, out) == CUDNN_STATUS_SUCCESS;
  }

 private:
  const CudaApi& api_;
  std::vector<cudnnBackendDescriptor_t> owned_;
};

// The three convolution operation types: their beta and their x-shaped, filter and y-shaped tensors.
struct ConvOpNames {
  // The op's name in a trace: the call, and the pass, which tells the planner what layer it is.
  const char* op_name;
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t beta;
  cudnnBackendAttributeName_t tensors[3];
  int output;  // index into tensors
};
// The forward convolution first (IsForwardConvolution).
constexpr ConvOpNames kConvOps[] = {
    {"cudnnBackendExecute (convolution forward)", CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
     {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
     2},
    {"cudnnBackendExecute (convolution backward data)", CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
     {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
     0},
    {"cudnnBackendExecute (convolution backward filter)",
     CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
     {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY},
     1},
};

// Whether an operation's output accumulates: beta (double or float) not zero; unreadable: assume it does.
bool Accumulates(const CudaApi& api, cudnnBackendDescriptor_t op, cudnnBackendAttributeName_t beta) {
  int64_t n = 0;
  double d = 0;
  if (api.cudnnBackendGetAttribute(op, beta, CUDNN_TYPE_DOUBLE, 1, &n, &d) == CUDNN_STATUS_SUCCESS) {
    return n > 0 && d != 0;  // not set: cuDNN's default beta is 0
  }
  float f = 0;
  if (api.cudnnBackendGetAttribute(op, beta, CUDNN_TYPE_FLOAT, 1, &n, &f) == CUDNN_STATUS_SUCCESS) {
    return n > 0 && f != 0;
  }
  return true;
}

// One tensor of a plan's graph: its unique id, how the graph uses it and where its bytes lie.
struct BackendRole {
  int64_t uid = 0;
  Access access = Access::kTouch;
  ConvTensor tensor;
};

// The access of every tensor unique id of the plan's graph; false when the graph cannot be read or is not made
// of convolutions of one type. Adds the convolutions' work to `d`.
bool BackendRoles(const CudaApi& api, cudnnBackendDescriptor_t plan, std::vector<BackendRole>* roles, OpDesc* d) {
  if (api.cudnnBackendCreateDescriptor == nullptr || api.cudnnBackendDestroyDescriptor == nullptr || plan == nullptr) {
    return false;
  }
  Scratch s(api);
  cudnnBackendDescriptor_t cfg =
      s.Child(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  cudnnBackendDescriptor_t engine =
      cfg != nullptr ? s.Child(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_BACKEND_ENGINE_DESCRIPTOR) : nullptr;
  cudnnBackendDescriptor_t graph =
      engine != nullptr ? s.Child(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)
                        : nullptr;
  int64_t count = 0;
  if (graph == nullptr ||
      api.cudnnBackendGetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                   nullptr) != CUDNN_STATUS_SUCCESS ||
      count < 1 || count > 64) {
    return false;
  }
  // A descriptor attribute is read into descriptors of the right type: try each convolution type in turn.
  for (const ConvOpNames& names : kConvOps) {
    std::vector<cudnnBackendDescriptor_t> ops;
    for (int64_t i = 0; i < count; ++i) {
      cudnnBackendDescriptor_t op = s.Make(names.type);
      if (op == nullptr) return false;
      ops.push_back(op);
    }
    int64_t got = 0;
    if (api.cudnnBackendGetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                     ops.data()) != CUDNN_STATUS_SUCCESS ||
        got != count) {
      continue;
    }
    OpDesc work;
    for (cudnnBackendDescriptor_t op : ops) {
      const bool accumulate = Accumulates(api, op, names.beta);
      ConvTensor t[3];
      for (int i = 0; i < 3; ++i) {
        cudnnBackendDescriptor_t tensor = s.Child(op, names.tensors[i], CUDNN_BACKEND_TENSOR_DESCRIPTOR);
        int64_t n = 0, n_strides = 0, n_type = 0, uid = 0, dims[CUDNN_DIM_MAX] = {}, strides[CUDNN_DIM_MAX] = {};
        if (tensor == nullptr || !s.Int64(tensor, CUDNN_ATTR_TENSOR_UNIQUE_ID, 1, &n, &uid) || n != 1) return false;
        cudnnDataType_t type = CUDNN_DATA_FLOAT;
        if (s.Int64(tensor, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_DIM_MAX, &n, dims) && n > 0 && n <= CUDNN_DIM_MAX &&
            api.cudnnBackendGetAttribute(tensor, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &n_type,
                                         &type) == CUDNN_STATUS_SUCCESS) {
          const bool strided = s.Int64(tensor, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_DIM_MAX, &n_strides, strides) &&
                               n_strides == n;
          t[i] = MakeTensor(dims, strided ? strides : nullptr, static_cast<int>(n), static_cast<int>(type));
          if (!strided) t[i].span = 0;  // strides not read: where its bytes lie is unknown
        }
        const Access a = i != names.output ? Access::kRead : accumulate ? Access::kReadWrite : Access::kWrite;
        auto it = std::find_if(roles->begin(), roles->end(), [&](const BackendRole& r) { return r.uid == uid; });
        if (it == roles->end()) {
          roles->push_back({uid, a, t[i]});
        } else {
          it->access = static_cast<Access>(static_cast<uint8_t>(it->access) | static_cast<uint8_t>(a));
        }
      }
      AddConvWork(t, names.output, accumulate, &work);
    }
    d->flops = work.flops;
    d->bytes = work.bytes;
    d->dtype = work.dtype;
    d->name = names.op_name;
    return true;
  }
  return false;
}

}  // namespace

void ConvWork(const CudaApi& api, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t y,
              const void* const (&data)[3], ConvOutput output, bool accumulate, OpDesc* d) {
  ConvTensor t[3];
  if (!ReadTensor(api, x, &t[0]) || !ReadFilter(api, w, &t[1]) || !ReadTensor(api, y, &t[2])) return;
  OpDesc work;
  AddConvWork(t, static_cast<int>(output), accumulate, &work);
  d->flops = work.flops;
  d->bytes = work.bytes;
  d->dtype = work.dtype;
  for (int i = 0; i < 3; ++i) StateExtent(d, data[i], t[i]);
}

bool ReadVariantPack(const CudaApi& api, cudnnBackendDescriptor_t pack, VariantPack* out) {
  *out = {};
  if (api.cudnnBackendGetAttribute == nullptr || pack == nullptr) return false;
  constexpr int64_t kMaxPointers = 64;
  void* pointers[kMaxPointers] = {};
  int64_t ids[kMaxPointers] = {};
  int64_t count = 0, n_ids = 0, n_ws = 0;
  if (api.cudnnBackendGetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, kMaxPointers,
                                   &count, pointers) != CUDNN_STATUS_SUCCESS) {
    count = 0;
  }
  if (api.cudnnBackendGetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, kMaxPointers, &n_ids,
                                   ids) != CUDNN_STATUS_SUCCESS) {
    n_ids = 0;
  }
  out->pointers.assign(pointers, pointers + std::clamp<int64_t>(count, 0, kMaxPointers));
  out->uids.assign(ids, ids + std::clamp<int64_t>(n_ids, 0, kMaxPointers));
  if (api.cudnnBackendGetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &n_ws,
                                   &out->workspace) != CUDNN_STATUS_SUCCESS ||
      n_ws != 1) {
    out->workspace = nullptr;
  }
  return true;
}

std::shared_ptr<const BackendPlanCopy> BackendPlanCopy::For(const CudaApi& api, cudnnHandle_t handle,
                                                            cudnnBackendDescriptor_t plan, uint64_t graph) {
  if (api.cudnnBackendCreateDescriptor == nullptr || api.cudnnBackendDestroyDescriptor == nullptr ||
      api.cudnnBackendSetAttribute == nullptr || api.cudnnBackendFinalize == nullptr ||
      api.cudnnBackendGetAttribute == nullptr || plan == nullptr) {
    return nullptr;
  }
  struct Key {
    cudnnHandle_t handle;
    cudnnBackendDescriptor_t plan;
    uint64_t graph;
    bool operator<(const Key& o) const { return std::tie(handle, plan, graph) < std::tie(o.handle, o.plan, o.graph); }
  };
  static std::mutex mu;
  // Failures are kept too (null). Never destroyed: at exit, cuDNN's handles may be gone before static destructors
  // run, and the plans die with the process.
  static auto* copies = new std::map<Key, std::shared_ptr<const BackendPlanCopy>>();
  constexpr size_t kMaxCopies = 512;
  const Key key{handle, plan, graph};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = copies->find(key); it != copies->end()) return it->second;
  if (copies->size() >= kMaxCopies) copies->clear();  // closures that hold a copy keep it alive

  std::shared_ptr<BackendPlanCopy> c(new BackendPlanCopy());
  c->create_ = api.cudnnBackendCreateDescriptor;
  c->set_ = api.cudnnBackendSetAttribute;
  c->finalize_ = api.cudnnBackendFinalize;
  c->destroy_ = api.cudnnBackendDestroyDescriptor;
  Scratch s(api);
  cudnnBackendDescriptor_t cfg =
      s.Child(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  if (cfg == nullptr ||
      api.cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &c->plan_) != CUDNN_STATUS_SUCCESS ||
      api.cudnnBackendSetAttribute(c->plan_, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) !=
          CUDNN_STATUS_SUCCESS ||
      api.cudnnBackendSetAttribute(c->plan_, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                   &cfg) != CUDNN_STATUS_SUCCESS ||
      api.cudnnBackendFinalize(c->plan_) != CUDNN_STATUS_SUCCESS) {
    c.reset();
  }
  copies->emplace(key, c);
  return c;
}

BackendPlanCopy::~BackendPlanCopy() {
  if (plan_ != nullptr) destroy_(plan_);
}

bool BackendPlanCopy::Execute(decltype(&::cudnnBackendExecute) execute, cudnnHandle_t handle,
                              const VariantPack& pack) const {
  cudnnBackendDescriptor_t vp = nullptr;
  if (create_(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp) != CUDNN_STATUS_SUCCESS) return false;
  void* workspace = pack.workspace;
  const auto n = static_cast<int64_t>(pack.uids.size());
  const bool ok =
      set_(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, pack.uids.data()) == CUDNN_STATUS_SUCCESS &&
      set_(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pack.pointers.data()) ==
          CUDNN_STATUS_SUCCESS &&
      set_(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace) == CUDNN_STATUS_SUCCESS &&
      finalize_(vp) == CUDNN_STATUS_SUCCESS && execute(handle, plan_, vp) == CUDNN_STATUS_SUCCESS;
  destroy_(vp);
  return ok;
}

OpDesc BackendOp(const CudaApi& api, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t variant_pack,
                 VariantPack* read) {
  OpDesc d;
  d.kind = trace::OpKind::kLibrary;
  d.name = "cudnnBackendExecute";
  VariantPack own;
  VariantPack& pack = read != nullptr ? *read : own;
  if (!ReadVariantPack(api, variant_pack, &pack)) return d;
  std::vector<BackendRole> roles;
  if (pack.uids.size() != pack.pointers.size() || !BackendRoles(api, plan, &roles, &d)) roles.clear();
  uint64_t h = kHashSeed;
  for (int64_t uid : pack.uids) h = HashMix(h, static_cast<uint64_t>(uid));
  for (size_t i = 0; i < pack.pointers.size(); ++i) {
    const BackendRole* role = nullptr;
    for (const BackendRole& r : roles) {
      if (i < pack.uids.size() && r.uid == pack.uids[i]) role = &r;
    }
    d.operands.push_back({AddressOf(pack.pointers[i]), role != nullptr ? role->access : Access::kTouch, false});
    if (role != nullptr) StateExtent(&d, pack.pointers[i], role->tensor);
  }
  d.shape = h;
  if (pack.workspace != nullptr) d.operands.push_back({AddressOf(pack.workspace), Access::kReadWrite, true});
  return d;
}

bool IsForwardConvolution(const OpDesc& d) { return d.name == kConvOps[0].op_name; }

}  // namespace karma::rt
