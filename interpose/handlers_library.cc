// Hook handlers for cuBLAS GEMMs and cuDNN convolutions: one op each, with the exact operands the API names
// (reads, writes, workspace), instead of the kernels the library launches internally (those calls pass
// through: the re-entry guard is set while a library call runs). GEMMs and convolutions can be issued again
// (recompute).
#include <array>
#include <cstring>

#include "interpose/hooks.h"
#include "runtime/session/hook_util.h"
#include "runtime/observe/library_ops.h"

namespace karma::hook {
namespace {

using rt::OpDesc;
using rt::Session;

// The operands are only worked out while the session observes or replays (which checks the call's shape);
// otherwise the op is just counted.
template <typename Err, typename RealCall, typename Describe>
Err Library(Err ok, RealCall call, Describe describe) {
  Session* s = Session::Get();
  if (s == nullptr) return call();
  OpDesc d;
  d.kind = trace::OpKind::kLibrary;
  if (s->observing() || s->replaying()) d = describe(s);
  return rt::Observed(s, d, ok, call);
}

OpDesc Gemm(Session* s, const char* name, cublasHandle_t handle, const rt::GemmShape& g, int scale_bytes,
            const void* A, const void* B, void* C, const void* alpha, const void* beta, cudaDataType a_type,
            cudaDataType b_type, cudaDataType c_type) {
  const rt::CudaApi& api = s->ApiFor(rt::CudaLib::kCublas);
  rt::GemmContext c;
  cudaStream_t stream = nullptr;
  if (api.cublasGetStream_v2 != nullptr && api.cublasGetStream_v2(handle, &stream) == CUBLAS_STATUS_SUCCESS) {
    c.stream = rt::KeyOf(stream);
  }
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_HOST;
  // Unknown pointer mode: treat the scalars as device pointers, never dereferenced.
  c.scalars_on_device = api.cublasGetPointerMode_v2 == nullptr ||
                        api.cublasGetPointerMode_v2(handle, &mode) != CUBLAS_STATUS_SUCCESS ||
                        mode == CUBLAS_POINTER_MODE_DEVICE;
  c.scale_bytes = scale_bytes;
  return rt::GemmOp(name, g, c, A, B, C, alpha, beta, a_type, b_type, c_type);
}

// A legacy convolution: x-shaped tensor, filter, y-shaped tensor, and which of them it writes (forward: x, w -> y;
// backward data: w, dy -> dx; backward filter: x, dy -> dw). beta's width follows the output's data type.
// `output_type`, when given, receives the written tensor's data type (-1 when it cannot be read).
OpDesc Conv(Session* s, const char* name, cudnnHandle_t handle, const void* x, const void* w, const void* y,
            rt::ConvOutput written, const void* beta, void* workspace, size_t workspace_bytes, const void* conv_desc,
            int algo, cudnnTensorDescriptor_t x_desc, cudnnFilterDescriptor_t w_desc, cudnnTensorDescriptor_t y_desc,
            int* output_type = nullptr) {
  const rt::CudaApi& api = s->ApiFor(rt::CudaLib::kCudnn);
  cudaStream_t stream = nullptr;
  if (api.cudnnGetStream == nullptr || api.cudnnGetStream(handle, &stream) != CUDNN_STATUS_SUCCESS) stream = nullptr;
  const int type = written == rt::ConvOutput::kW ? rt::CudnnFilterType(api, w_desc)
                   : written == rt::ConvOutput::kX ? rt::CudnnTensorType(api, x_desc)
                                                   : rt::CudnnTensorType(api, y_desc);
  if (output_type != nullptr) *output_type = type;
  const bool accumulate = !rt::CudnnBetaIsZero(beta, type);
  const uint64_t shape = rt::HashMix(rt::AddressOf(conv_desc), static_cast<uint64_t>(algo));
  // ConvOutput numbers the three tensors: it writes data[written] and reads the other two, in the call's order.
  const void* const data[3] = {x, w, y};
  const int out = static_cast<int>(written);
  OpDesc d = rt::ConvOp(name, rt::KeyOf(stream), {data[out == 0 ? 1 : 0], data[out == 2 ? 1 : 2]},
                        const_cast<void*>(data[out]), accumulate, workspace, workspace_bytes, shape);
  rt::ConvWork(api, x_desc, w_desc, y_desc, data, written, accumulate, &d);
  return d;
}

// A GEMM issued again (recompute) with the recorded arguments: host-side scalars are copied now, device-side ones
// stay pointers, as the call itself would read them.
struct Scalars {
  std::array<unsigned char, 16> alpha{}, beta{};
  bool on_device = true;
  const void* alpha_ptr = nullptr;
  const void* beta_ptr = nullptr;
  Scalars(const OpDesc& d, const void* a, const void* b, int bytes) : alpha_ptr(a), beta_ptr(b) {
    // GemmOp lists device-side scalars as operands; otherwise they are host values that must be copied.
    on_device = d.operands.size() > 3;
    if (!on_device && a != nullptr && b != nullptr && bytes > 0 && bytes <= 16) {
      std::memcpy(alpha.data(), a, static_cast<size_t>(bytes));
      std::memcpy(beta.data(), b, static_cast<size_t>(bytes));
    } else {
      on_device = true;
    }
  }
  template <typename T>
  const T* A() const { return static_cast<const T*>(on_device ? alpha_ptr : alpha.data()); }
  template <typename T>
  const T* B() const { return static_cast<const T*>(on_device ? beta_ptr : beta.data()); }
};

template <typename T>
T* Map(const rt::AddressMap& map, T* p) {
  return reinterpret_cast<T*>(map(rt::AddressOf(p)));
}

}  // namespace

cublasStatus_t cublasSgemm_v2(cublasSgemm_v2_fn real, cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha, const float* A,
                              int lda, const float* B, int ldb, const float* beta, float* C, int ldc) {
  return Library(
      CUBLAS_STATUS_SUCCESS, [&] { return real(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc); },
      [&](Session* s) {
        const rt::GemmShape g{m, n, k, 1, transa != CUBLAS_OP_N, transb != CUBLAS_OP_N, lda, ldb, ldc};
        OpDesc d = Gemm(s, "cublasSgemm_v2", handle, g, 4, A, B, C, alpha, beta, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F);
        if (s->observing() || s->replaying()) {
          d.relaunch = [=, sc = Scalars(d, alpha, beta, 4)](const rt::AddressMap& map) {
            return real(handle, transa, transb, m, n, k, sc.A<float>(), Map(map, A), lda, Map(map, B), ldb,
                        sc.B<float>(), Map(map, C), ldc) == CUBLAS_STATUS_SUCCESS;
          };
        }
        return d;
      });
}

cublasStatus_t cublasSgemmStridedBatched(cublasSgemmStridedBatched_fn real, cublasHandle_t handle,
                                         cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda, long long int strideA,
                                         const float* B, int ldb, long long int strideB, const float* beta, float* C,
                                         int ldc, long long int strideC, int batchCount) {
  return Library(
      CUBLAS_STATUS_SUCCESS,
      [&] {
        return real(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
                    batchCount);
      },
      [&](Session* s) {
        const rt::GemmShape g{m, n, k, batchCount, transa != CUBLAS_OP_N, transb != CUBLAS_OP_N, lda, ldb, ldc,
                              strideA, strideB, strideC};
        OpDesc d = Gemm(s, "cublasSgemmStridedBatched", handle, g, 4, A, B, C, alpha, beta, CUDA_R_32F, CUDA_R_32F,
                        CUDA_R_32F);
        d.shape = rt::HashMix(rt::HashMix(rt::HashMix(d.shape, strideA), strideB), strideC);
        if (s->observing() || s->replaying()) {
          d.relaunch = [=, sc = Scalars(d, alpha, beta, 4)](const rt::AddressMap& map) {
            return real(handle, transa, transb, m, n, k, sc.A<float>(), Map(map, A), lda, strideA, Map(map, B), ldb,
                        strideB, sc.B<float>(), Map(map, C), ldc, strideC, batchCount) == CUBLAS_STATUS_SUCCESS;
          };
        }
        return d;
      });
}

cublasStatus_t cublasGemmEx(cublasGemmEx_fn real, cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha, const void* A,
                            cudaDataType Atype, int lda, const void* B, cudaDataType Btype, int ldb, const void* beta,
                            void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  return Library(
      CUBLAS_STATUS_SUCCESS,
      [&] {
        return real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                    computeType, algo);
      },
      [&](Session* s) {
        const rt::GemmShape g{m, n, k, 1, transa != CUBLAS_OP_N, transb != CUBLAS_OP_N, lda, ldb, ldc};
        const int scale = rt::GemmScaleBytes(computeType, Ctype);
        OpDesc d = Gemm(s, "cublasGemmEx", handle, g, scale, A, B, C, alpha, beta, Atype, Btype, Ctype);
        d.shape = rt::HashMix(d.shape, static_cast<uint64_t>(computeType));
        if (s->observing() || s->replaying()) {
          d.relaunch = [=, sc = Scalars(d, alpha, beta, scale)](const rt::AddressMap& map) {
            return real(handle, transa, transb, m, n, k, sc.A<void>(), Map(map, A), Atype, lda, Map(map, B), Btype,
                        ldb, sc.B<void>(), Map(map, C), Ctype, ldc, computeType, algo) == CUBLAS_STATUS_SUCCESS;
          };
        }
        return d;
      });
}

cudnnStatus_t cudnnConvolutionForward(cudnnConvolutionForward_fn real, cudnnHandle_t handle, const void* alpha,
                                      const cudnnTensorDescriptor_t xDesc, const void* x,
                                      const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
                                      void* workSpace, size_t workSpaceSizeInBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  return Library(
      CUDNN_STATUS_SUCCESS,
      [&] {
        return real(handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, yDesc,
                    y);
      },
      [&](Session* s) {
        int type = -1;
        OpDesc d = Conv(s, "cudnnConvolutionForward", handle, x, w, y, rt::ConvOutput::kY, beta, workSpace,
                        workSpaceSizeInBytes, convDesc, algo, xDesc, wDesc, yDesc, &type);
        // A recompute issues it again with copies of the descriptors as they are now (the application's may be
        // gone by then) and the scaling factors' values (host memory).
        auto desc = rt::ConvDescriptors::Copy(s->ApiFor(rt::CudaLib::kCudnn), xDesc, wDesc, convDesc, yDesc);
        if (desc != nullptr && type >= 0 && alpha != nullptr && beta != nullptr) {
          const auto bytes = static_cast<size_t>(rt::CudnnScalingBytes(type));
          std::array<unsigned char, 8> a{}, b{};
          std::memcpy(a.data(), alpha, bytes);
          std::memcpy(b.data(), beta, bytes);
          d.relaunch = [=](const rt::AddressMap& map) {
            return real(handle, a.data(), desc->x, Map(map, x), desc->w, Map(map, w), desc->conv, algo,
                        Map(map, workSpace), workSpaceSizeInBytes, b.data(), desc->y, Map(map, y)) ==
                   CUDNN_STATUS_SUCCESS;
          };
        }
        return d;
      });
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnConvolutionBackwardData_fn real, cudnnHandle_t handle,
                                           const void* alpha, const cudnnFilterDescriptor_t wDesc, const void* w,
                                           const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                           size_t workSpaceSizeInBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  return Library(
      CUDNN_STATUS_SUCCESS,
      [&] {
        return real(handle, alpha, wDesc, w, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta,
                    dxDesc, dx);
      },
      [&](Session* s) {
        return Conv(s, "cudnnConvolutionBackwardData", handle, dx, w, dy, rt::ConvOutput::kX, beta, workSpace,
                    workSpaceSizeInBytes, convDesc, algo, dxDesc, wDesc, dyDesc);
      });
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnConvolutionBackwardFilter_fn real, cudnnHandle_t handle,
                                             const void* alpha, const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                             size_t workSpaceSizeInBytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  return Library(
      CUDNN_STATUS_SUCCESS,
      [&] {
        return real(handle, alpha, xDesc, x, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta,
                    dwDesc, dw);
      },
      [&](Session* s) {
        return Conv(s, "cudnnConvolutionBackwardFilter", handle, x, dw, dy, rt::ConvOutput::kW, beta, workSpace,
                    workSpaceSizeInBytes, convDesc, algo, xDesc, dwDesc, dyDesc);
      });
}

cudnnStatus_t cudnnBackendExecute(cudnnBackendExecute_fn real, cudnnHandle_t handle,
                                  cudnnBackendDescriptor_t executionPlan, cudnnBackendDescriptor_t variantPack) {
  return Library(
      CUDNN_STATUS_SUCCESS, [&] { return real(handle, executionPlan, variantPack); },
      [&](Session* s) {
        const rt::CudaApi& api = s->ApiFor(rt::CudaLib::kCudnn);
        rt::VariantPack pack;
        OpDesc d = rt::BackendOp(api, executionPlan, variantPack, &pack);
        cudaStream_t stream = nullptr;
        if (api.cudnnGetStream != nullptr && api.cudnnGetStream(handle, &stream) == CUDNN_STATUS_SUCCESS) {
          d.stream = rt::KeyOf(stream);
        }
        d.shape = rt::HashMix(d.shape, rt::AddressOf(executionPlan));
        // A forward convolution (only forward ops are recomputed) can be issued again with a plan of the session's
        // own, made once per graph: the application may destroy its plan, or make another at the same address.
        // Finalizing a plan can take milliseconds on a GPU, so backward passes get none.
        if (d.flops > 0 && rt::IsForwardConvolution(d) && !pack.uids.empty() &&
            pack.uids.size() == pack.pointers.size()) {
          uint64_t graph = rt::HashMix(d.shape, d.flops);
          for (const rt::Operand& o : d.operands) {
            graph = rt::HashMix(graph, (o.bytes << 3) ^ (static_cast<uint64_t>(o.access) << 1) ^ (o.gaps ? 1 : 0));
          }
          if (auto copy = rt::BackendPlanCopy::For(api, handle, executionPlan, graph)) {
            d.relaunch = [=](const rt::AddressMap& map) {
              rt::VariantPack now = pack;
              for (void*& p : now.pointers) p = Map(map, p);
              now.workspace = Map(map, now.workspace);
              return copy->Execute(real, handle, now);
            };
          }
        }
        return d;
      });
}

}  // namespace karma::hook
