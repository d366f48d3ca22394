// cuBLAS / cuDNN operand sets.
#include "runtime/session/library_ops.h"

#include <cstring>

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
  d.operands.push_back({AddressOf(A), Access::kRead, false});
  d.operands.push_back({AddressOf(B), Access::kRead, false});
  d.operands.push_back({AddressOf(C), beta_zero ? Access::kWrite : Access::kReadWrite, false});
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
  // cuDNN's scaling factors are double for double tensors and float for every other type.
  return AllZero(beta, data_type == CUDNN_DATA_DOUBLE ? 8 : 4);
}

int CudnnTensorType(const CudaApi& api, cudnnTensorDescriptor_t desc) {
  if (api.cudnnGetTensorNdDescriptor == nullptr || desc == nullptr) return -1;
  cudnnDataType_t t;
  int nb = 0, dims[CUDNN_DIM_MAX], strides[CUDNN_DIM_MAX];
  if (api.cudnnGetTensorNdDescriptor(desc, CUDNN_DIM_MAX, &t, &nb, dims, strides) != CUDNN_STATUS_SUCCESS) return -1;
  return static_cast<int>(t);
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

OpDesc BackendOp(const CudaApi& api, cudnnBackendDescriptor_t variant_pack) {
  OpDesc d;
  d.kind = trace::OpKind::kLibrary;
  d.name = "cudnnBackendExecute";
  if (api.cudnnBackendGetAttribute == nullptr || variant_pack == nullptr) return d;
  constexpr int64_t kMaxPointers = 64;
  void* pointers[kMaxPointers] = {};
  int64_t count = 0;
  if (api.cudnnBackendGetAttribute(variant_pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                   kMaxPointers, &count, pointers) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < count && i < kMaxPointers; ++i) d.operands.push_back({AddressOf(pointers[i]), Access::kTouch, false});
  }
  int64_t ids[kMaxPointers] = {};
  int64_t n_ids = 0;
  uint64_t h = kHashSeed;
  if (api.cudnnBackendGetAttribute(variant_pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, kMaxPointers,
                                   &n_ids, ids) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n_ids && i < kMaxPointers; ++i) h = HashMix(h, static_cast<uint64_t>(ids[i]));
  }
  d.shape = h;
  void* workspace = nullptr;
  int64_t n_ws = 0;
  if (api.cudnnBackendGetAttribute(variant_pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &n_ws,
                                   &workspace) == CUDNN_STATUS_SUCCESS &&
      n_ws == 1 && workspace != nullptr) {
    d.operands.push_back({AddressOf(workspace), Access::kReadWrite, true});
  }
  return d;
}

}  // namespace karma::rt
