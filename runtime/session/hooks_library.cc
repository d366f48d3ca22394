// Hook handlers for cuBLAS GEMMs and cuDNN convolutions: one op each, with the exact operands the API names
// (reads, writes, workspace), instead of the kernels the library launches internally (those calls pass
// through: the re-entry guard is set while a library call runs).
#include "interpose/hooks.h"
#include "runtime/session/library_ops.h"
#include "runtime/session/session.h"

namespace karma::hook {
namespace {

using rt::Access;
using rt::OpDesc;
using rt::Session;

template <typename Err, typename RealCall>
Err Observed(Session* s, const OpDesc& d, RealCall real, Err ok) {
  rt::OpScope op = s->BeginOp(d);
  const Err e = real();
  op.End(e == ok);
  return e;
}

// The operands only matter while the session records; otherwise the op is just counted.
OpDesc Counted(trace::OpKind kind) {
  OpDesc d;
  d.kind = kind;
  return d;
}

rt::GemmContext CublasContext(const rt::CudaApi& api, cublasHandle_t handle) {
  rt::GemmContext c;
  cudaStream_t stream = nullptr;
  if (api.cublasGetStream_v2 != nullptr && api.cublasGetStream_v2(handle, &stream) == CUBLAS_STATUS_SUCCESS) {
    c.stream = rt::KeyOf(stream);
  }
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_HOST;
  if (api.cublasGetPointerMode_v2 != nullptr &&
      api.cublasGetPointerMode_v2(handle, &mode) == CUBLAS_STATUS_SUCCESS) {
    c.scalars_on_device = mode == CUBLAS_POINTER_MODE_DEVICE;
  } else {
    c.scalars_on_device = true;  // unknown: do not dereference beta
  }
  return c;
}

cudaStream_t CudnnStream(const rt::CudaApi& api, cudnnHandle_t handle) {
  cudaStream_t stream = nullptr;
  if (api.cudnnGetStream == nullptr || api.cudnnGetStream(handle, &stream) != CUDNN_STATUS_SUCCESS) return nullptr;
  return stream;
}

}  // namespace

cublasStatus_t cublasSgemm_v2(cublasSgemm_v2_fn real, cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha, const float* A,
                              int lda, const float* B, int ldb, const float* beta, float* C, int ldc) {
  Session* s = Session::Get();
  auto call = [&] { return real(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc); };
  if (s == nullptr) return call();
  if (!s->observing()) return Observed(s, Counted(trace::OpKind::kLibrary), call, CUBLAS_STATUS_SUCCESS);
  rt::GemmShape g{m, n, k, 1, transa != CUBLAS_OP_N, transb != CUBLAS_OP_N, lda, ldb, ldc};
  rt::GemmContext c = CublasContext(s->ApiFor(rt::CudaLib::kCublas), handle);
  const OpDesc d = rt::GemmOp("cublasSgemm_v2", g, c, A, B, C, alpha, beta, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F);
  return Observed(s, d, call, CUBLAS_STATUS_SUCCESS);
}

cublasStatus_t cublasSgemmStridedBatched(cublasSgemmStridedBatched_fn real, cublasHandle_t handle,
                                         cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda, long long int strideA,
                                         const float* B, int ldb, long long int strideB, const float* beta, float* C,
                                         int ldc, long long int strideC, int batchCount) {
  Session* s = Session::Get();
  auto call = [&] {
    return real(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
                batchCount);
  };
  if (s == nullptr) return call();
  if (!s->observing()) return Observed(s, Counted(trace::OpKind::kLibrary), call, CUBLAS_STATUS_SUCCESS);
  rt::GemmShape g{m, n, k, batchCount, transa != CUBLAS_OP_N, transb != CUBLAS_OP_N, lda, ldb, ldc};
  rt::GemmContext c = CublasContext(s->ApiFor(rt::CudaLib::kCublas), handle);
  OpDesc d = rt::GemmOp("cublasSgemmStridedBatched", g, c, A, B, C, alpha, beta, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F);
  d.shape = rt::HashMix(rt::HashMix(rt::HashMix(d.shape, strideA), strideB), strideC);
  return Observed(s, d, call, CUBLAS_STATUS_SUCCESS);
}

cublasStatus_t cublasGemmEx(cublasGemmEx_fn real, cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha, const void* A,
                            cudaDataType Atype, int lda, const void* B, cudaDataType Btype, int ldb, const void* beta,
                            void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  Session* s = Session::Get();
  auto call = [&] {
    return real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                computeType, algo);
  };
  if (s == nullptr) return call();
  if (!s->observing()) return Observed(s, Counted(trace::OpKind::kLibrary), call, CUBLAS_STATUS_SUCCESS);
  rt::GemmShape g{m, n, k, 1, transa != CUBLAS_OP_N, transb != CUBLAS_OP_N, lda, ldb, ldc};
  rt::GemmContext c = CublasContext(s->ApiFor(rt::CudaLib::kCublas), handle);
  c.scale_bytes = rt::GemmScaleBytes(computeType, Ctype);
  OpDesc d = rt::GemmOp("cublasGemmEx", g, c, A, B, C, alpha, beta, Atype, Btype, Ctype);
  d.shape = rt::HashMix(d.shape, static_cast<uint64_t>(computeType));
  return Observed(s, d, call, CUBLAS_STATUS_SUCCESS);
}

cudnnStatus_t cudnnConvolutionForward(cudnnConvolutionForward_fn real, cudnnHandle_t handle, const void* alpha,
                                      const cudnnTensorDescriptor_t xDesc, const void* x,
                                      const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
                                      void* workSpace, size_t workSpaceSizeInBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  Session* s = Session::Get();
  auto call = [&] {
    return real(handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, yDesc, y);
  };
  if (s == nullptr) return call();
  if (!s->observing()) return Observed(s, Counted(trace::OpKind::kLibrary), call, CUDNN_STATUS_SUCCESS);
  const bool accumulate = !rt::CudnnBetaIsZero(beta, rt::CudnnTensorType(s->ApiFor(rt::CudaLib::kCudnn), yDesc));
  const OpDesc d = rt::ConvOp("cudnnConvolutionForward", rt::KeyOf(CudnnStream(s->ApiFor(rt::CudaLib::kCudnn), handle)), {x, w}, y,
                              accumulate, workSpace, workSpaceSizeInBytes,
                              rt::HashMix(reinterpret_cast<uint64_t>(convDesc), static_cast<uint64_t>(algo)));
  return Observed(s, d, call, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnConvolutionBackwardData_fn real, cudnnHandle_t handle,
                                           const void* alpha, const cudnnFilterDescriptor_t wDesc, const void* w,
                                           const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                           size_t workSpaceSizeInBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  Session* s = Session::Get();
  auto call = [&] {
    return real(handle, alpha, wDesc, w, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, dxDesc,
                dx);
  };
  if (s == nullptr) return call();
  if (!s->observing()) return Observed(s, Counted(trace::OpKind::kLibrary), call, CUDNN_STATUS_SUCCESS);
  const bool accumulate = !rt::CudnnBetaIsZero(beta, rt::CudnnTensorType(s->ApiFor(rt::CudaLib::kCudnn), dxDesc));
  const OpDesc d = rt::ConvOp("cudnnConvolutionBackwardData", rt::KeyOf(CudnnStream(s->ApiFor(rt::CudaLib::kCudnn), handle)), {w, dy}, dx,
                              accumulate, workSpace, workSpaceSizeInBytes,
                              rt::HashMix(reinterpret_cast<uint64_t>(convDesc), static_cast<uint64_t>(algo)));
  return Observed(s, d, call, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnConvolutionBackwardFilter_fn real, cudnnHandle_t handle,
                                             const void* alpha, const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                             size_t workSpaceSizeInBytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  Session* s = Session::Get();
  auto call = [&] {
    return real(handle, alpha, xDesc, x, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, dwDesc,
                dw);
  };
  if (s == nullptr) return call();
  if (!s->observing()) return Observed(s, Counted(trace::OpKind::kLibrary), call, CUDNN_STATUS_SUCCESS);
  const bool accumulate = !rt::CudnnBetaIsZero(beta, rt::CudnnFilterType(s->ApiFor(rt::CudaLib::kCudnn), dwDesc));
  const OpDesc d = rt::ConvOp("cudnnConvolutionBackwardFilter", rt::KeyOf(CudnnStream(s->ApiFor(rt::CudaLib::kCudnn), handle)), {x, dy},
                              dw, accumulate, workSpace, workSpaceSizeInBytes,
                              rt::HashMix(reinterpret_cast<uint64_t>(convDesc), static_cast<uint64_t>(algo)));
  return Observed(s, d, call, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnBackendExecute(cudnnBackendExecute_fn real, cudnnHandle_t handle,
                                  cudnnBackendDescriptor_t executionPlan, cudnnBackendDescriptor_t variantPack) {
  Session* s = Session::Get();
  auto call = [&] { return real(handle, executionPlan, variantPack); };
  if (s == nullptr) return call();
  if (!s->observing()) return Observed(s, Counted(trace::OpKind::kLibrary), call, CUDNN_STATUS_SUCCESS);
  OpDesc d = rt::BackendOp(s->ApiFor(rt::CudaLib::kCudnn), variantPack);
  d.stream = rt::KeyOf(CudnnStream(s->ApiFor(rt::CudaLib::kCudnn), handle));
  d.shape = rt::HashMix(d.shape, reinterpret_cast<uint64_t>(executionPlan));
  return Observed(s, d, call, CUDNN_STATUS_SUCCESS);
}

}  // namespace karma::hook
