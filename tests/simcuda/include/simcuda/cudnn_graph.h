// Convolution graphs through cuDNN's backend API, built the way the cuDNN frontend (and so PyTorch) builds them:
// for programs and tests that drive cudnnBackendExecute. Header-only, plain cuDNN calls; works with any libcudnn.
#pragma once

#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace simcuda_graph {

enum ConvPass { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

// One convolution operation: packed NCHW fp32 tensors x (n, c, h, w), w (k, c, r, s), y (n, k, p, q) with their
// unique ids; for a backward pass x and y stand for dx and dy, w for dw.
struct ConvSpec {
  ConvPass pass = kForward;
  int64_t x[4] = {}, w[4] = {}, y[4] = {};
  int64_t pad[2] = {0, 0}, stride[2] = {1, 1}, dilation[2] = {1, 1};
  bool mirror = false;  // CUDNN_CONVOLUTION rather than cross-correlation
  double alpha = 1, beta = 0;
  int64_t uid[3] = {'x', 'w', 'y'};
};

namespace detail {

// Descriptors made while building, destroyed at the end whatever happens.
class Built {
 public:
  ~Built() {
    for (cudnnBackendDescriptor_t d : made_) cudnnBackendDestroyDescriptor(d);
  }
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;

  cudnnBackendDescriptor_t Make(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    if (status == CUDNN_STATUS_SUCCESS) status = cudnnBackendCreateDescriptor(type, &d);
    if (d != nullptr) made_.push_back(d);
    return d;
  }
  void Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* values) {
    if (status == CUDNN_STATUS_SUCCESS) status = cudnnBackendSetAttribute(d, name, type, count, values);
  }
  void SetDesc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value) {
    Set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
  }
  void Finalize(cudnnBackendDescriptor_t d) {
    if (status == CUDNN_STATUS_SUCCESS) status = cudnnBackendFinalize(d);
  }
  // Keeps `d` alive: the caller owns it now.
  void Release(cudnnBackendDescriptor_t d) { made_.erase(std::remove(made_.begin(), made_.end(), d), made_.end()); }

  cudnnBackendDescriptor_t Tensor(int64_t uid, const int64_t dims[4]) {
    cudnnBackendDescriptor_t t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}, alignment = 16;
    const cudnnDataType_t type = CUDNN_DATA_FLOAT;
    Set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    Set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    Set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    Set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    Set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    Finalize(t);
    return t;
  }

  cudnnBackendDescriptor_t Operation(const ConvSpec& s) {
    cudnnBackendDescriptor_t conv = Make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const int64_t spatial = 2;
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = s.mirror ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION;
    Set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    Set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    Set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
    Set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, s.pad);
    Set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, s.pad);
    Set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, s.stride);
    Set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, s.dilation);
    Finalize(conv);
    // The operation type, then its alpha, beta, convolution, x-, w- and y-shaped attributes.
    static constexpr cudnnBackendDescriptorType_t kType[3] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    static constexpr cudnnBackendAttributeName_t kNames[3][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY}};
    const auto& names = kNames[s.pass];
    const cudnnBackendDescriptor_t tensors[3] = {Tensor(s.uid[0], s.x), Tensor(s.uid[1], s.w), Tensor(s.uid[2], s.y)};
    cudnnBackendDescriptor_t op = Make(kType[s.pass]);
    Set(op, names[0], CUDNN_TYPE_DOUBLE, 1, &s.alpha);
    Set(op, names[1], CUDNN_TYPE_DOUBLE, 1, &s.beta);
    SetDesc(op, names[2], conv);
    for (int i = 0; i < 3; ++i) SetDesc(op, names[3 + i], tensors[i]);
    Finalize(op);
    return op;
  }

 private:
  std::vector<cudnnBackendDescriptor_t> made_;
};

}  // namespace detail

// An execution plan running `ops` in order (an operation graph, the heuristics' first engine configuration) and
// its workspace bytes. The caller destroys the plan with cudnnBackendDestroyDescriptor.
inline cudnnStatus_t BuildPlan(cudnnHandle_t handle, const std::vector<ConvSpec>& ops,
                               cudnnBackendDescriptor_t* plan, int64_t* workspace_bytes) {
  detail::Built b;
  std::vector<cudnnBackendDescriptor_t> operations;
  for (const ConvSpec& s : ops) operations.push_back(b.Operation(s));
  cudnnBackendDescriptor_t graph = b.Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  b.Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  b.Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(operations.size()),
        operations.data());
  b.Finalize(graph);
  cudnnBackendDescriptor_t heuristics = b.Make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_INSTANT;
  b.SetDesc(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  b.Set(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  b.Finalize(heuristics);
  cudnnBackendDescriptor_t config = b.Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t count = 0;
  if (b.status == CUDNN_STATUS_SUCCESS) {
    b.status = cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                        &count, &config);
  }
  if (b.status == CUDNN_STATUS_SUCCESS && count < 1) b.status = CUDNN_STATUS_NOT_SUPPORTED;
  cudnnBackendDescriptor_t result = b.Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  b.Set(result, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  b.SetDesc(result, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
  b.Finalize(result);
  if (b.status == CUDNN_STATUS_SUCCESS) {
    b.status = cudnnBackendGetAttribute(result, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count,
                                        workspace_bytes);
  }
  if (b.status != CUDNN_STATUS_SUCCESS) return b.status;
  b.Release(result);
  *plan = result;
  return CUDNN_STATUS_SUCCESS;
}

// Runs a plan with a variant pack of (unique id, pointer) pairs and a workspace (may be null).
inline cudnnStatus_t Execute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, const std::vector<int64_t>& uids,
                             const std::vector<const void*>& pointers, void* workspace) {
  detail::Built b;
  cudnnBackendDescriptor_t pack = b.Make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  b.Set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data());
  b.Set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(pointers.size()),
        pointers.data());
  b.Set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  b.Finalize(pack);
  if (b.status == CUDNN_STATUS_SUCCESS) b.status = cudnnBackendExecute(handle, plan, pack);
  return b.status;
}

}  // namespace simcuda_graph
