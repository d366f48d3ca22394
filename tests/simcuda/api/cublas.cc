// libcublas.so.13 on simcuda: handles and fp32 GEMMs, run as a kernel launched through the driver API.
#include <cublas_api.h>
#include <cuda.h>

#include <algorithm>

#include "api/driver_client.h"
#include "device/gemm.h"
#include "simcuda/kernel_abi.h"

// Like the real cuBLAS, which reaches the driver through cuGetProcAddress from its static runtime, the GEMM is
// a kernel of a module loaded with cuModuleLoadData and launched with cuLaunchKernel; a tool that hooks the
// driver's entry points sees it as a kernel whose pointer parameters are A, B and C.
struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
};

namespace {

struct GemmArgs {
  int transa, transb, m, n, k;
  float alpha;
  const float* a;
  int lda;
  long long stride_a;
  const float* b;
  int ldb;
  long long stride_b;
  float beta;
  float* c;
  int ldc;
  long long stride_c;
  int batch;
};

template <typename T>
T Arg(const simcuda_launch* l, int i) {
  return *static_cast<const T*>(l->args[i]);
}

GemmArgs Unpack(const simcuda_launch* l) {
  return {Arg<int>(l, 0),           Arg<int>(l, 1),          Arg<int>(l, 2),        Arg<int>(l, 3),
          Arg<int>(l, 4),           Arg<float>(l, 5),        Arg<float*>(l, 6),     Arg<int>(l, 7),
          Arg<long long>(l, 8),     Arg<float*>(l, 9),       Arg<int>(l, 10),       Arg<long long>(l, 11),
          Arg<float>(l, 12),        Arg<float*>(l, 13),      Arg<int>(l, 14),       Arg<long long>(l, 15),
          Arg<int>(l, 16)};
}

void GemmBody(const simcuda_launch* l) {
  const GemmArgs g = Unpack(l);
  for (int i = 0; i < g.batch; ++i) {
    simcuda::Sgemm(g.transa != 0, g.transb != 0, g.m, g.n, g.k, g.alpha, g.a + i * g.stride_a, g.lda,
                   g.b + i * g.stride_b, g.ldb, g.beta, g.c + i * g.stride_c, g.ldc);
  }
}

// Bytes from the first to the last element of a batch of column-major rows x cols matrices.
size_t Span(int rows, int cols, int ld, long long stride, int batch) {
  if (rows == 0 || cols == 0) return 0;
  const long long one = static_cast<long long>(cols - 1) * ld + rows;
  return static_cast<size_t>((static_cast<long long>(batch - 1) * stride + one) * 4);
}

void GemmCost(const simcuda_launch* l, simcuda_cost* cost) {
  const GemmArgs g = Unpack(l);
  const double m = g.m, n = g.n, k = g.k, batch = g.batch;
  cost->flops = 2 * m * n * k * batch;
  cost->bytes = 4 * (m * k + k * n + m * n * (g.beta != 0 ? 2 : 1)) * batch;
  simcuda_add_range(cost, g.a, Span(g.transa ? g.k : g.m, g.transa ? g.m : g.k, g.lda, g.stride_a, g.batch));
  simcuda_add_range(cost, g.b, Span(g.transb ? g.n : g.k, g.transb ? g.k : g.n, g.ldb, g.stride_b, g.batch));
  simcuda_add_range(cost, g.c, Span(g.m, g.n, g.ldc, g.stride_c, g.batch));
}

constexpr size_t kSizes[] = {4, 4, 4, 4, 4, 4, 8, 4, 8, 8, 4, 8, 4, 8, 4, 8, 4};
constexpr size_t kAligns[] = {4, 4, 4, 4, 4, 4, 8, 4, 8, 8, 4, 8, 4, 8, 4, 8, 4};
constexpr char kGemmName[] = "simcuda_cublas_sgemm_strided_batched";
const simcuda_kernel kGemmKernel = {kGemmName, 17, kSizes, kAligns, GemmBody, GemmCost};
const simcuda_module kModule = {SIMCUDA_MODULE_MAGIC, SIMCUDA_MODULE_VERSION, 1, &kGemmKernel};

const simcuda_api::DriverModule* GetDriver() {
  static const simcuda_api::DriverModule* driver = simcuda_api::LoadDriverModule(kModule);
  return driver;
}

// One setting of a handle into `out`.
template <typename T>
cublasStatus_t Get(cublasHandle_t handle, T* out, T cublasContext::*field) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *out = handle->*field;
  return CUBLAS_STATUS_SUCCESS;
}

bool Valid(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

cublasStatus_t Gemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                     const float* alpha, const float* A, int lda, long long strideA, const float* B, int ldb,
                     long long strideB, const float* beta, float* C, int ldc, long long strideC, int batch) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!Valid(transa) || !Valid(transb) || m < 0 || n < 0 || k < 0 || batch < 0 || alpha == nullptr ||
      beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;  // real data: C is the same as T
  if (lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const simcuda_api::DriverModule* driver = GetDriver();
  if (driver == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  int ita = ta, itb = tb;
  // In device pointer mode alpha and beta are read in stream order, which is now: earlier work has executed.
  float a = *alpha, b = *beta;
  void* args[] = {&ita, &itb, &m, &n, &k, &a, &A, &lda, &strideA, &B, &ldb, &strideB, &b, &C, &ldc, &strideC,
                  &batch};
  const unsigned gx = static_cast<unsigned>((m + 15) / 16), gy = static_cast<unsigned>((n + 15) / 16);
  const CUresult r = driver->launch(driver->kernels[0], gx, gy, static_cast<unsigned>(batch), 16, 16, 1, 0,
                                    handle->stream, args, nullptr);
  return r == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (GetDriver() == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int* version) {
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = streamId;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* streamId) {
  return Get(handle, streamId, &cublasContext::stream);
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void*, size_t) {
  return handle != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
  handle->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode) {
  return Get(handle, mode, &cublasContext::pointer_mode);
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math_mode = mode;  // fp32 results are computed the same way in every mode
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  return Get(handle, mode, &cublasContext::math_mode);
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown error";
  }
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                              int n, int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc) {
  return Gemm(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb, long long int strideB,
                                         const float* beta, float* C, int ldc, long long int strideC,
                                         int batchCount) {
  return Gemm(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
              batchCount);
}

namespace {
bool Fp32(cudaDataType a, cudaDataType b, cudaDataType c, cublasComputeType_t compute) {
  const bool types = a == CUDA_R_32F && b == CUDA_R_32F && c == CUDA_R_32F;
  return types && (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
                   compute == CUBLAS_COMPUTE_32F_FAST_TF32 || compute == CUBLAS_COMPUTE_32F_FAST_16F ||
                   compute == CUBLAS_COMPUTE_32F_FAST_16BF);
}
}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  if (!Fp32(Atype, Btype, Ctype, computeType)) return CUBLAS_STATUS_NOT_SUPPORTED;
  return Gemm(handle, transa, transb, m, n, k, static_cast<const float*>(alpha), static_cast<const float*>(A), lda,
              0, static_cast<const float*>(B), ldb, 0, static_cast<const float*>(beta), static_cast<float*>(C), ldc,
              0, 1);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                          const void* A, cudaDataType Atype, int lda, long long int strideA,
                                          const void* B, cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  if (!Fp32(Atype, Btype, Ctype, computeType)) return CUBLAS_STATUS_NOT_SUPPORTED;
  return Gemm(handle, transa, transb, m, n, k, static_cast<const float*>(alpha), static_cast<const float*>(A), lda,
              strideA, static_cast<const float*>(B), ldb, strideB, static_cast<const float*>(beta),
              static_cast<float*>(C), ldc, strideC, batchCount);
}

}  // extern "C"
