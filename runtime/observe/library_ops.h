// The operands of cuBLAS and cuDNN calls: which pointers a call reads, writes and uses as workspace, and its
// work, derived from the arguments alone.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "runtime/base/cuda_api.h"
#include "runtime/observe/ops.h"

namespace karma::rt {

struct GemmShape {
  int m = 0, n = 0, k = 0;
  int batch = 1;
  bool trans_a = false, trans_b = false;
  int lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between the matrices of a strided batch
};

struct GemmContext {
  StreamKey stream = 0;
  bool scalars_on_device = false;  // CUBLAS_POINTER_MODE_DEVICE: alpha and beta are device pointers
  int scale_bytes = 4;              // bytes of alpha/beta; 0 when unknown
};

// Bytes of cuBLAS's alpha/beta for a compute type and output type (0 when unknown).
int GemmScaleBytes(cublasComputeType_t compute, cudaDataType c_type);
// "float32", "float16", ... for a CUDA data type; nullptr when it has no name here.
const char* DataTypeName(cudaDataType t);
int DataTypeBytes(cudaDataType t);

// C = alpha op(A) op(B) + beta C: A and B read; C written, and read too unless beta is known to be zero (a host
// scalar whose bytes are all zero). Device-side scalars are read operands. A, B and C carry their exact extents.
OpDesc GemmOp(const char* name, const GemmShape& g, const GemmContext& c, const void* A, const void* B, void* C,
              const void* alpha, const void* beta, cudaDataType a_type, cudaDataType b_type, cudaDataType c_type);

// True when beta (host memory, as cuDNN requires) is exactly +0 for the output's data type.
bool CudnnBetaIsZero(const void* beta, int data_type);
// The bytes of cuDNN's scaling factors (alpha, beta) for a tensor of `data_type`: double for double tensors and
// float for every other type.
inline int CudnnScalingBytes(int data_type) { return data_type == CUDNN_DATA_DOUBLE ? 8 : 4; }
// The data type of a descriptor (-1 when it cannot be read).
int CudnnTensorType(const CudaApi& api, cudnnTensorDescriptor_t desc);
int CudnnFilterType(const CudaApi& api, cudnnFilterDescriptor_t desc);

// A convolution: inputs read; the output written (and read when it accumulates); workspace read and written.
OpDesc ConvOp(const char* name, StreamKey stream, std::initializer_list<const void*> inputs, void* output,
              bool accumulate, void* workspace, size_t workspace_bytes, uint64_t shape);

// Which of a convolution's three tensors a call writes: x (backward data), w (backward filter), y (forward); the
// value is the tensor's index in the order x, w, y.
enum class ConvOutput : uint8_t { kX, kW, kY };
// A legacy convolution's work from its descriptors (x-shaped, filter, y-shaped): 2 * |y| * |w| / K flops, the
// three tensors' bytes (the output's twice when it accumulates) and the data type; and the extent of the operands
// at `data` (the three tensors' pointers, in that order) from their dimensions and strides: a strided tensor's
// extent has gaps, and an output written whole (beta 0, no gaps) is marked so. `d` is left as it is when a
// descriptor cannot be read.
void ConvWork(const CudaApi& api, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t y,
              const void* const (&data)[3], ConvOutput output, bool accumulate, OpDesc* d);

// Copies of a legacy convolution's descriptors (x-shaped tensor, filter, convolution with its math type and group
// count, y-shaped tensor), owned by the copy: a recompute issues the convolution again after the application may
// have changed or destroyed its own. Null when a descriptor cannot be read or made (a missing symbol, a failed
// call); nothing is left behind then.
class ConvDescriptors {
 public:
  static std::shared_ptr<const ConvDescriptors> Copy(const CudaApi& api, cudnnTensorDescriptor_t x,
                                                     cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t conv,
                                                     cudnnTensorDescriptor_t y);
  ~ConvDescriptors();
  ConvDescriptors(const ConvDescriptors&) = delete;
  ConvDescriptors& operator=(const ConvDescriptors&) = delete;

  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

 private:
  ConvDescriptors() = default;
  bool CopyTensor(const CudaApi& api, cudnnTensorDescriptor_t from, cudnnTensorDescriptor_t* to);
  // The destroy functions, kept by value: the copy may outlive the table it was made with.
  decltype(&::cudnnDestroyTensorDescriptor) destroy_tensor_ = nullptr;
  decltype(&::cudnnDestroyFilterDescriptor) destroy_filter_ = nullptr;
  decltype(&::cudnnDestroyConvolutionDescriptor) destroy_conv_ = nullptr;
};

// A variant pack's contents: the unique ids, the data pointers (the same number when both could be read; each
// list is empty when it cannot be), and the workspace (null when none).
struct VariantPack {
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  void* workspace = nullptr;
};
// False without cudnnBackendGetAttribute or a pack; otherwise fills what can be read (64 pointers at most).
bool ReadVariantPack(const CudaApi& api, cudnnBackendDescriptor_t pack, VariantPack* out);

// An execution plan of the session's own, finalized from the engine configuration of an application's plan: a
// recompute issues the same graph again with it, whatever the application does with its own plan meanwhile.
class BackendPlanCopy {
 public:
  // The copy for `plan` as it is now; `graph` tells graphs apart that an application made at one address in turn
  // (BackendOp's description of the call). Copies are made once and kept (a few hundred at most). Null when the
  // plan cannot be copied.
  static std::shared_ptr<const BackendPlanCopy> For(const CudaApi& api, cudnnHandle_t handle,
                                                    cudnnBackendDescriptor_t plan, uint64_t graph);
  ~BackendPlanCopy();
  BackendPlanCopy(const BackendPlanCopy&) = delete;
  BackendPlanCopy& operator=(const BackendPlanCopy&) = delete;
  // Runs the copy through `execute` (the real cudnnBackendExecute) with a variant pack made for `pack`.
  bool Execute(decltype(&::cudnnBackendExecute) execute, cudnnHandle_t handle, const VariantPack& pack) const;

 private:
  BackendPlanCopy() = default;
  cudnnBackendDescriptor_t plan_ = nullptr;
  decltype(&::cudnnBackendCreateDescriptor) create_ = nullptr;
  decltype(&::cudnnBackendSetAttribute) set_ = nullptr;
  decltype(&::cudnnBackendFinalize) finalize_ = nullptr;
  decltype(&::cudnnBackendDestroyDescriptor) destroy_ = nullptr;
};

// cudnnBackendExecute. The plan's operation graph is read back through cudnnBackendGetAttribute (plan -> engine
// configuration -> engine -> graph -> operations -> tensors' unique ids, each into a descriptor created for the
// query): when every operation is a convolution of one type, the variant pack's pointers get exact directions
// (forward: X, W read, Y written; backward data: W, DY read, DX written; backward filter: X, DY read, DW written;
// an output whose beta is not zero is read too) and extents (as ConvWork's), and the op its flops and bytes. Any other graph, or one that
// cannot be read: every data pointer is touched. The workspace is read and written.
// `pack`, when given, receives the variant pack as read (what a recompute issues the call again with).
OpDesc BackendOp(const CudaApi& api, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t variant_pack,
                 VariantPack* pack = nullptr);
// Whether BackendOp found a graph of forward convolutions.
bool IsForwardConvolution(const OpDesc& d);

}  // namespace karma::rt
