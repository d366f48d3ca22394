// libcudnn.so.9 on simcuda, backend (graph) API subset: typed descriptor attributes, operation graphs of fp32
// NCHW 2-D convolutions, one engine, heuristics, execution plans and variant packs, executed as the legacy kernels.
#include <cudnn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "api/cudnn_internal.h"

namespace simcuda_cudnn {
namespace {

struct Desc;
// A descriptor referenced by another one is copied when it is set, as cuDNN does: later changes to (or the
// destruction of) the original do not affect the referring descriptor.
using Snapshot = std::shared_ptr<const Desc>;

struct Attr {
  cudnnBackendAttributeType_t type = CUDNN_TYPE_INT64;
  int64_t count = 0;
  std::vector<unsigned char> bytes;  // every attribute type but descriptors
  std::vector<Snapshot> descs;       // CUDNN_TYPE_BACKEND_DESCRIPTOR
};

struct Desc {
  cudnnBackendDescriptorType_t type = CUDNN_BACKEND_TENSOR_DESCRIPTOR;
  bool finalized = false;
  std::map<cudnnBackendAttributeName_t, Attr> attrs;
};

// ---- what each descriptor type accepts ------------------------------------------------------------------

constexpr int kNoRef = -1;  // not a descriptor attribute
constexpr int kAnyOp = -2;  // any operation descriptor

struct Spec {
  cudnnBackendDescriptorType_t desc;
  cudnnBackendAttributeName_t name;
  cudnnBackendAttributeType_t type;
  cudnnBackendAttributeType_t alt;  // a second accepted type (float scalars), else == type
  int ref;                          // referenced descriptor type for CUDNN_TYPE_BACKEND_DESCRIPTOR
  bool required;
  bool settable;  // false: computed when the descriptor is finalized
};

#define SPEC(D, N, T, REF, REQ) \
  {CUDNN_BACKEND_##D##_DESCRIPTOR, CUDNN_ATTR_##N, CUDNN_TYPE_##T, CUDNN_TYPE_##T, REF, REQ, true}
#define SCALAR(D, N) {CUDNN_BACKEND_##D##_DESCRIPTOR, CUDNN_ATTR_##N, CUDNN_TYPE_DOUBLE, CUDNN_TYPE_FLOAT, kNoRef, false, true}
#define OUT(D, N, T, REF) \
  {CUDNN_BACKEND_##D##_DESCRIPTOR, CUDNN_ATTR_##N, CUDNN_TYPE_##T, CUDNN_TYPE_##T, REF, false, false}
constexpr int kTensor = CUDNN_BACKEND_TENSOR_DESCRIPTOR;
constexpr int kConv = CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR;
constexpr int kGraph = CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR;
constexpr int kEngine = CUDNN_BACKEND_ENGINE_DESCRIPTOR;
constexpr int kEngineCfg = CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;

const Spec kSpecs[] = {
    SPEC(TENSOR, TENSOR_BYTE_ALIGNMENT, INT64, kNoRef, true),
    SPEC(TENSOR, TENSOR_DATA_TYPE, DATA_TYPE, kNoRef, true),
    SPEC(TENSOR, TENSOR_DIMENSIONS, INT64, kNoRef, true),
    SPEC(TENSOR, TENSOR_STRIDES, INT64, kNoRef, true),
    SPEC(TENSOR, TENSOR_UNIQUE_ID, INT64, kNoRef, true),
    SPEC(TENSOR, TENSOR_IS_VIRTUAL, BOOLEAN, kNoRef, false),
    SPEC(TENSOR, TENSOR_IS_BY_VALUE, BOOLEAN, kNoRef, false),
    SPEC(TENSOR, TENSOR_VECTOR_COUNT, INT64, kNoRef, false),
    SPEC(TENSOR, TENSOR_VECTORIZED_DIMENSION, INT64, kNoRef, false),
    SPEC(TENSOR, TENSOR_REORDERING_MODE, TENSOR_REORDERING_MODE, kNoRef, false),
    SPEC(CONVOLUTION, CONVOLUTION_COMP_TYPE, DATA_TYPE, kNoRef, true),
    SPEC(CONVOLUTION, CONVOLUTION_CONV_MODE, CONVOLUTION_MODE, kNoRef, true),
    SPEC(CONVOLUTION, CONVOLUTION_SPATIAL_DIMS, INT64, kNoRef, true),
    SPEC(CONVOLUTION, CONVOLUTION_DILATIONS, INT64, kNoRef, true),
    SPEC(CONVOLUTION, CONVOLUTION_FILTER_STRIDES, INT64, kNoRef, true),
    SPEC(CONVOLUTION, CONVOLUTION_PRE_PADDINGS, INT64, kNoRef, true),
    SPEC(CONVOLUTION, CONVOLUTION_POST_PADDINGS, INT64, kNoRef, true),
    SCALAR(OPERATION_CONVOLUTION_FORWARD, OPERATION_CONVOLUTION_FORWARD_ALPHA),
    SCALAR(OPERATION_CONVOLUTION_FORWARD, OPERATION_CONVOLUTION_FORWARD_BETA),
    SPEC(OPERATION_CONVOLUTION_FORWARD, OPERATION_CONVOLUTION_FORWARD_CONV_DESC, BACKEND_DESCRIPTOR, kConv, true),
    SPEC(OPERATION_CONVOLUTION_FORWARD, OPERATION_CONVOLUTION_FORWARD_W, BACKEND_DESCRIPTOR, kTensor, true),
    SPEC(OPERATION_CONVOLUTION_FORWARD, OPERATION_CONVOLUTION_FORWARD_X, BACKEND_DESCRIPTOR, kTensor, true),
    SPEC(OPERATION_CONVOLUTION_FORWARD, OPERATION_CONVOLUTION_FORWARD_Y, BACKEND_DESCRIPTOR, kTensor, true),
    SCALAR(OPERATION_CONVOLUTION_BACKWARD_DATA, OPERATION_CONVOLUTION_BWD_DATA_ALPHA),
    SCALAR(OPERATION_CONVOLUTION_BACKWARD_DATA, OPERATION_CONVOLUTION_BWD_DATA_BETA),
    SPEC(OPERATION_CONVOLUTION_BACKWARD_DATA, OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, BACKEND_DESCRIPTOR, kConv, true),
    SPEC(OPERATION_CONVOLUTION_BACKWARD_DATA, OPERATION_CONVOLUTION_BWD_DATA_W, BACKEND_DESCRIPTOR, kTensor, true),
    SPEC(OPERATION_CONVOLUTION_BACKWARD_DATA, OPERATION_CONVOLUTION_BWD_DATA_DX, BACKEND_DESCRIPTOR, kTensor, true),
    SPEC(OPERATION_CONVOLUTION_BACKWARD_DATA, OPERATION_CONVOLUTION_BWD_DATA_DY, BACKEND_DESCRIPTOR, kTensor, true),
    SCALAR(OPERATION_CONVOLUTION_BACKWARD_FILTER, OPERATION_CONVOLUTION_BWD_FILTER_ALPHA),
    SCALAR(OPERATION_CONVOLUTION_BACKWARD_FILTER, OPERATION_CONVOLUTION_BWD_FILTER_BETA),
    SPEC(OPERATION_CONVOLUTION_BACKWARD_FILTER, OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, BACKEND_DESCRIPTOR, kConv,
         true),
    SPEC(OPERATION_CONVOLUTION_BACKWARD_FILTER, OPERATION_CONVOLUTION_BWD_FILTER_DW, BACKEND_DESCRIPTOR, kTensor, true),
    SPEC(OPERATION_CONVOLUTION_BACKWARD_FILTER, OPERATION_CONVOLUTION_BWD_FILTER_X, BACKEND_DESCRIPTOR, kTensor, true),
    SPEC(OPERATION_CONVOLUTION_BACKWARD_FILTER, OPERATION_CONVOLUTION_BWD_FILTER_DY, BACKEND_DESCRIPTOR, kTensor, true),
    SPEC(OPERATIONGRAPH, OPERATIONGRAPH_HANDLE, HANDLE, kNoRef, true),
    SPEC(OPERATIONGRAPH, OPERATIONGRAPH_OPS, BACKEND_DESCRIPTOR, kAnyOp, true),
    SPEC(OPERATIONGRAPH, OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED, BOOLEAN, kNoRef, false),
    OUT(OPERATIONGRAPH, OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, INT64, kNoRef),
    SPEC(ENGINEHEUR, ENGINEHEUR_OPERATION_GRAPH, BACKEND_DESCRIPTOR, kGraph, true),
    SPEC(ENGINEHEUR, ENGINEHEUR_MODE, HEUR_MODE, kNoRef, true),
    SPEC(ENGINEHEUR, ENGINEHEUR_SM_COUNT_TARGET, INT32, kNoRef, false),
    OUT(ENGINEHEUR, ENGINEHEUR_RESULTS, BACKEND_DESCRIPTOR, kEngineCfg),
    SPEC(ENGINE, ENGINE_OPERATION_GRAPH, BACKEND_DESCRIPTOR, kGraph, true),
    SPEC(ENGINE, ENGINE_GLOBAL_INDEX, INT64, kNoRef, true),
    SPEC(ENGINE, ENGINE_SM_COUNT_TARGET, INT32, kNoRef, false),
    OUT(ENGINE, ENGINE_KNOB_INFO, BACKEND_DESCRIPTOR, CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR),
    OUT(ENGINE, ENGINE_NUMERICAL_NOTE, NUMERICAL_NOTE, kNoRef),
    OUT(ENGINE, ENGINE_BEHAVIOR_NOTE, BEHAVIOR_NOTE, kNoRef),
    OUT(ENGINE, ENGINE_LAYOUT_INFO, BACKEND_DESCRIPTOR, CUDNN_BACKEND_LAYOUT_INFO_DESCRIPTOR),
    SPEC(ENGINECFG, ENGINECFG_ENGINE, BACKEND_DESCRIPTOR, kEngine, true),
    SPEC(ENGINECFG, ENGINECFG_KNOB_CHOICES, BACKEND_DESCRIPTOR, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, false),
    OUT(ENGINECFG, ENGINECFG_WORKSPACE_SIZE, INT64, kNoRef),
    OUT(ENGINECFG, ENGINECFG_INTERMEDIATE_INFO, BACKEND_DESCRIPTOR, CUDNN_BACKEND_INTERMEDIATE_INFO_DESCRIPTOR),
    SPEC(EXECUTION_PLAN, EXECUTION_PLAN_HANDLE, HANDLE, kNoRef, true),
    SPEC(EXECUTION_PLAN, EXECUTION_PLAN_ENGINE_CONFIG, BACKEND_DESCRIPTOR, kEngineCfg, true),
    SPEC(EXECUTION_PLAN, EXECUTION_PLAN_RUN_ONLY_INTERMEDIATE_UIDS, INT64, kNoRef, false),
    OUT(EXECUTION_PLAN, EXECUTION_PLAN_WORKSPACE_SIZE, INT64, kNoRef),
    OUT(EXECUTION_PLAN, EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS, INT64, kNoRef),
    SPEC(VARIANT_PACK, VARIANT_PACK_UNIQUE_IDS, INT64, kNoRef, true),
    SPEC(VARIANT_PACK, VARIANT_PACK_DATA_POINTERS, VOID_PTR, kNoRef, true),
    SPEC(VARIANT_PACK, VARIANT_PACK_INTERMEDIATES, VOID_PTR, kNoRef, false),
    SPEC(VARIANT_PACK, VARIANT_PACK_WORKSPACE, VOID_PTR, kNoRef, false),
    SPEC(KNOB_CHOICE, KNOB_CHOICE_KNOB_TYPE, KNOB_TYPE, kNoRef, true),
    SPEC(KNOB_CHOICE, KNOB_CHOICE_KNOB_VALUE, INT64, kNoRef, true),
};
#undef SPEC
#undef SCALAR
#undef OUT

const Spec* FindSpec(cudnnBackendDescriptorType_t type, cudnnBackendAttributeName_t name) {
  for (const Spec& s : kSpecs) {
    if (s.desc == type && s.name == name) return &s;
  }
  return nullptr;
}

bool Creatable(cudnnBackendDescriptorType_t type) {
  return std::any_of(std::begin(kSpecs), std::end(kSpecs), [&](const Spec& s) { return s.desc == type; }) ||
         type == CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR || type == CUDNN_BACKEND_LAYOUT_INFO_DESCRIPTOR ||
         type == CUDNN_BACKEND_INTERMEDIATE_INFO_DESCRIPTOR;
}

bool IsConvOp(cudnnBackendDescriptorType_t t) {
  return t == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
         t == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
         t == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
}

bool IsOperation(int t) {
  return t == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
         t == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR ||
         t == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
         (t >= CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR && t <= CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR) ||
         t == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR || t == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR;
}

size_t ElementBytes(cudnnBackendAttributeType_t t) {
  switch (t) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_FLOAT: return sizeof(float);
    case CUDNN_TYPE_DOUBLE: return sizeof(double);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void*);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    case CUDNN_TYPE_CHAR: return 1;
    case CUDNN_TYPE_FRACTION: return sizeof(cudnnFraction_t);
    default: return sizeof(int);  // enumerations and INT32
  }
}

// ---- live descriptors -----------------------------------------------------------------------------------

std::mutex g_mu;
std::unordered_set<const Desc*>& Live() {
  static auto* live = new std::unordered_set<const Desc*>;
  return *live;
}

Desc* Lookup(cudnnBackendDescriptor_t d) {
  auto* p = static_cast<Desc*>(d);
  return Live().count(p) != 0 ? p : nullptr;
}

// ---- reading attributes ---------------------------------------------------------------------------------

const Attr* Get(const Desc& d, cudnnBackendAttributeName_t name) {
  auto it = d.attrs.find(name);
  return it == d.attrs.end() ? nullptr : &it->second;
}

std::vector<int64_t> Ints(const Desc& d, cudnnBackendAttributeName_t name) {
  const Attr* a = Get(d, name);
  std::vector<int64_t> v;
  if (a == nullptr || a->type != CUDNN_TYPE_INT64 || a->count == 0) return v;
  v.resize(static_cast<size_t>(a->count));
  std::memcpy(v.data(), a->bytes.data(), v.size() * sizeof(int64_t));
  return v;
}

int64_t Int(const Desc& d, cudnnBackendAttributeName_t name, int64_t fallback) {
  const std::vector<int64_t> v = Ints(d, name);
  return v.empty() ? fallback : v[0];
}

template <typename T>
T Enum(const Desc& d, cudnnBackendAttributeName_t name, T fallback) {
  const Attr* a = Get(d, name);
  if (a == nullptr || a->count < 1 || a->bytes.size() < sizeof(T)) return fallback;
  T v;
  std::memcpy(&v, a->bytes.data(), sizeof v);
  return v;
}

double Scalar(const Desc& d, cudnnBackendAttributeName_t name, double fallback) {
  const Attr* a = Get(d, name);
  if (a == nullptr || a->count < 1) return fallback;
  if (a->type == CUDNN_TYPE_FLOAT) {
    float f;
    std::memcpy(&f, a->bytes.data(), sizeof f);
    return f;
  }
  double v;
  std::memcpy(&v, a->bytes.data(), sizeof v);
  return v;
}

const Desc* Ref(const Desc& d, cudnnBackendAttributeName_t name) {
  const Attr* a = Get(d, name);
  return a == nullptr || a->descs.empty() ? nullptr : a->descs[0].get();
}

// ---- convolution operations ---------------------------------------------------------------------------

struct ConvOp {
  ConvKind kind = ConvKind::kForward;
  simcuda::ConvGeometry g{};
  float alpha = 1, beta = 0;
  int64_t a_uid = 0, b_uid = 0, out_uid = 0;  // the operands in Launch's order
};

struct TensorInfo {
  int64_t uid = 0;
  int64_t dims[4] = {}, strides[4] = {};
};

cudnnStatus_t Tensor(const Desc* t, TensorInfo* out) {
  if (t == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (Enum(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_DATA_FLOAT) != CUDNN_DATA_FLOAT) {
    return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  }
  const std::vector<int64_t> dims = Ints(*t, CUDNN_ATTR_TENSOR_DIMENSIONS);
  const std::vector<int64_t> strides = Ints(*t, CUDNN_ATTR_TENSOR_STRIDES);
  if (dims.size() != 4 || strides.size() != 4) return CUDNN_STATUS_NOT_SUPPORTED_SHAPE;
  out->uid = Int(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, 0);
  std::copy(dims.begin(), dims.end(), out->dims);
  std::copy(strides.begin(), strides.end(), out->strides);
  return CUDNN_STATUS_SUCCESS;
}

// The three operation types name their operands differently; this reads any of them.
cudnnStatus_t ReadConvOp(const Desc& op, ConvOp* out) {
  cudnnBackendAttributeName_t alpha, beta, conv, x, w, y;
  ConvKind kind;
  switch (op.type) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
      kind = ConvKind::kForward, alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
      beta = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, conv = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
      x = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, w = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
      y = CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y;
      break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
      kind = ConvKind::kBackwardData, alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
      beta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
      conv = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, x = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
      w = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, y = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY;
      break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
      kind = ConvKind::kBackwardFilter, alpha = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
      beta = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
      conv = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, x = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
      w = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, y = CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY;
      break;
    default: return CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN;
  }
  TensorInfo tx, tw, ty;
  for (auto [name, info] : {std::pair{x, &tx}, {w, &tw}, {y, &ty}}) {
    const cudnnStatus_t s = Tensor(Ref(op, name), info);
    if (s != CUDNN_STATUS_SUCCESS) return s;
  }
  // The filter must be packed K x C x R x S.
  if (tw.strides[3] != 1 || tw.strides[2] != tw.dims[3] || tw.strides[1] != tw.dims[2] * tw.dims[3] ||
      tw.strides[0] != tw.dims[1] * tw.dims[2] * tw.dims[3]) {
    return CUDNN_STATUS_NOT_SUPPORTED_LAYOUT;
  }
  const Desc* c = Ref(op, conv);
  if (c == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (Int(*c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 0) != 2) return CUDNN_STATUS_NOT_SUPPORTED_SHAPE;
  if (Enum(*c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_DATA_FLOAT) != CUDNN_DATA_FLOAT) {
    return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  }
  const std::vector<int64_t> pre = Ints(*c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS),
                             post = Ints(*c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS),
                             stride = Ints(*c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES),
                             dil = Ints(*c, CUDNN_ATTR_CONVOLUTION_DILATIONS);
  if (pre != post) return CUDNN_STATUS_NOT_SUPPORTED_PADDING;
  const bool flip = Enum(*c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_CROSS_CORRELATION) == CUDNN_CONVOLUTION;
  ConvOp r;
  r.kind = kind;
  const cudnnStatus_t s = MakeGeometry(tx.dims, tx.strides, tw.dims, ty.dims, ty.strides, pre.data(),
                                       stride.data(), dil.data(), flip, &r.g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  r.alpha = static_cast<float>(Scalar(op, alpha, 1.0));
  r.beta = static_cast<float>(Scalar(op, beta, 0.0));
  switch (kind) {
    case ConvKind::kForward: r.a_uid = tx.uid, r.b_uid = tw.uid, r.out_uid = ty.uid; break;
    case ConvKind::kBackwardData: r.a_uid = tw.uid, r.b_uid = ty.uid, r.out_uid = tx.uid; break;
    case ConvKind::kBackwardFilter: r.a_uid = tx.uid, r.b_uid = ty.uid, r.out_uid = tw.uid; break;
  }
  *out = r;
  return CUDNN_STATUS_SUCCESS;
}

const Attr* Ops(const Desc& graph) { return Get(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS); }

// The one engine runs graphs of convolutions between non-virtual tensors, one operation after the other.
bool EngineSupports(const Desc& graph) {
  const Attr* ops = Ops(graph);
  if (ops == nullptr || ops->descs.empty()) return false;
  for (const Snapshot& op : ops->descs) {
    if (!IsConvOp(op->type)) return false;
    for (const auto& [name, attr] : op->attrs) {
      for (const Snapshot& t : attr.descs) {
        if (t->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR && Enum(*t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, false)) return false;
      }
    }
  }
  return true;
}

size_t GraphWorkspace(const Desc& graph) {
  size_t bytes = 0;
  const Attr* ops = Ops(graph);
  for (const Snapshot& op : ops != nullptr ? ops->descs : std::vector<Snapshot>{}) {
    ConvOp c;
    if (ReadConvOp(*op, &c) == CUDNN_STATUS_SUCCESS) bytes = std::max(bytes, ColumnWorkspaceBytes(c.g));
  }
  return bytes;
}

// ---- setting and finalizing -----------------------------------------------------------------------------

Attr Store(cudnnBackendAttributeType_t type, const void* elements, int64_t count) {
  Attr a;
  a.type = type;
  a.count = count;
  if (count == 0) return a;
  const auto* p = static_cast<const unsigned char*>(elements);
  a.bytes.assign(p, p + static_cast<size_t>(count) * ElementBytes(type));
  return a;
}

void SetOut(Desc& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const void* elements,
            int64_t count) {
  d.attrs[name] = Store(type, elements, count);
}

cudnnStatus_t Finalize(Desc& d);

// A finalized descriptor built here (heuristics results).
Snapshot Build(cudnnBackendDescriptorType_t type, std::map<cudnnBackendAttributeName_t, Attr> attrs,
               cudnnStatus_t* status) {
  auto d = std::make_shared<Desc>();
  d->type = type;
  d->attrs = std::move(attrs);
  *status = Finalize(*d);
  return d;
}

Attr DescAttr(Snapshot s) {
  Attr a;
  a.type = CUDNN_TYPE_BACKEND_DESCRIPTOR;
  a.count = 1;
  a.descs.push_back(std::move(s));
  return a;
}

cudnnStatus_t Finalize(Desc& d) {
  if (d.finalized) return CUDNN_STATUS_BAD_PARAM;
  for (const Spec& s : kSpecs) {
    if (s.desc == d.type && s.required && d.attrs.count(s.name) == 0) return CUDNN_STATUS_BAD_PARAM;
  }
  switch (d.type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: {
      const std::vector<int64_t> dims = Ints(d, CUDNN_ATTR_TENSOR_DIMENSIONS);
      const std::vector<int64_t> strides = Ints(d, CUDNN_ATTR_TENSOR_STRIDES);
      if (dims.empty() || dims.size() > CUDNN_DIM_MAX || dims.size() != strides.size()) return CUDNN_STATUS_BAD_PARAM;
      for (size_t i = 0; i < dims.size(); ++i) {
        if (dims[i] <= 0 || strides[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
      }
      if (Int(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 0) <= 0) return CUDNN_STATUS_BAD_PARAM;
      break;
    }
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: {
      const int64_t n = Int(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 0);
      if (n < 1 || n > CUDNN_DIM_MAX - 2) return CUDNN_STATUS_BAD_PARAM;
      for (auto name : {CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
                        CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS}) {
        if (Ints(d, name).size() != static_cast<size_t>(n)) return CUDNN_STATUS_BAD_PARAM;
      }
      break;
    }
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: {
      ConvOp op;
      const cudnnStatus_t s = ReadConvOp(d, &op);
      if (s != CUDNN_STATUS_SUCCESS) return s;
      break;
    }
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: {
      if (Ops(d)->descs.empty()) return CUDNN_STATUS_BAD_PARAM;
      const int64_t count = EngineSupports(d) ? 1 : 0;
      SetOut(d, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, &count, 1);
      break;
    }
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: {
      const Desc* graph = Ref(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH);
      const int64_t count = graph != nullptr ? Int(*graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, 0) : 0;
      const int64_t index = Int(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, -1);
      if (count == 0) return CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN;
      if (index < 0 || index >= count) return CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND;
      for (auto [name, type] : {std::pair{CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR},
                                {CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE},
                                {CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE},
                                {CUDNN_ATTR_ENGINE_LAYOUT_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR}}) {
        SetOut(d, name, type, nullptr, 0);
      }
      break;
    }
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: {
      const Desc* engine = Ref(d, CUDNN_ATTR_ENGINECFG_ENGINE);
      const Desc* graph = engine != nullptr ? Ref(*engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH) : nullptr;
      if (graph == nullptr) return CUDNN_STATUS_BAD_PARAM;
      const int64_t ws = static_cast<int64_t>(GraphWorkspace(*graph));
      SetOut(d, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, &ws, 1);
      SetOut(d, CUDNN_ATTR_ENGINECFG_INTERMEDIATE_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR, nullptr, 0);
      break;
    }
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: {
      // Every engine of the graph, as finalized engine configurations without knobs.
      const Attr* graph = Get(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
      if (graph->descs.empty()) return CUDNN_STATUS_BAD_PARAM;
      const int64_t count = Int(*graph->descs[0], CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, 0);
      Attr results;
      results.type = CUDNN_TYPE_BACKEND_DESCRIPTOR;
      for (int64_t i = 0; i < count; ++i) {
        cudnnStatus_t s;
        Snapshot engine = Build(CUDNN_BACKEND_ENGINE_DESCRIPTOR,
                                {{CUDNN_ATTR_ENGINE_OPERATION_GRAPH, *graph},
                                 {CUDNN_ATTR_ENGINE_GLOBAL_INDEX, Store(CUDNN_TYPE_INT64, &i, 1)}},
                                &s);
        if (s != CUDNN_STATUS_SUCCESS) return s;
        Snapshot cfg = Build(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, {{CUDNN_ATTR_ENGINECFG_ENGINE, DescAttr(engine)}}, &s);
        if (s != CUDNN_STATUS_SUCCESS) return s;
        results.descs.push_back(cfg);
      }
      results.count = static_cast<int64_t>(results.descs.size());
      d.attrs[CUDNN_ATTR_ENGINEHEUR_RESULTS] = results;
      break;
    }
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
      const Desc* cfg = Ref(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
      if (cfg == nullptr) return CUDNN_STATUS_BAD_PARAM;
      const int64_t ws = Int(*cfg, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, 0);
      SetOut(d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, &ws, 1);
      SetOut(d, CUDNN_ATTR_EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS, CUDNN_TYPE_INT64, nullptr, 0);
      break;
    }
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      if (Get(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)->count != Get(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)->count) {
        return CUDNN_STATUS_BAD_PARAM;
      }
      break;
    default: break;
  }
  d.finalized = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t SetAttribute(Desc& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                           int64_t count, const void* elements) {
  if (d.finalized) return CUDNN_STATUS_BAD_PARAM;
  const Spec* spec = FindSpec(d.type, name);
  if (spec == nullptr || !spec->settable) return CUDNN_STATUS_BAD_PARAM;
  if (type != spec->type && type != spec->alt) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
  if (count < 0) return CUDNN_STATUS_BAD_PARAM;
  if (count > 0 && elements == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    d.attrs[name] = Store(type, elements, count);
    return CUDNN_STATUS_SUCCESS;
  }
  Attr a;
  a.type = type;
  a.count = count;
  const auto* handles = static_cast<const cudnnBackendDescriptor_t*>(elements);
  for (int64_t i = 0; i < count; ++i) {
    const Desc* ref = Lookup(handles[i]);
    if (ref == nullptr) return CUDNN_STATUS_BAD_PARAM;
    if (!ref->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
    const bool matches = spec->ref == kAnyOp ? IsOperation(ref->type) : ref->type == spec->ref;
    if (!matches) return CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE;
    a.descs.push_back(std::make_shared<const Desc>(*ref));
  }
  d.attrs[name] = std::move(a);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t GetAttribute(const Desc& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                           int64_t requested, int64_t* count, void* elements) {
  const Spec* spec = FindSpec(d.type, name);
  if (spec == nullptr || requested < 0) return CUDNN_STATUS_BAD_PARAM;
  if (type != spec->type && type != spec->alt) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
  const Attr* a = Get(d, name);
  const int64_t available = a == nullptr ? 0 : a->count;  // an optional attribute not set has no elements
  if (count != nullptr) *count = available;
  const int64_t n = std::min(requested, available);
  if (n == 0) return CUDNN_STATUS_SUCCESS;
  if (elements == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    // The caller passes descriptors it created, of the right type; each receives a copy.
    auto* handles = static_cast<cudnnBackendDescriptor_t*>(elements);
    for (int64_t i = 0; i < n; ++i) {
      if (Lookup(handles[i]) == nullptr) return CUDNN_STATUS_BAD_PARAM;
      if (static_cast<Desc*>(handles[i])->type != a->descs[static_cast<size_t>(i)]->type) {
        return CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE;
      }
    }
    for (int64_t i = 0; i < n; ++i) *static_cast<Desc*>(handles[i]) = *a->descs[static_cast<size_t>(i)];
    return CUDNN_STATUS_SUCCESS;
  }
  if (type != a->type) {  // a float scalar read as double, or the reverse
    const double v = Scalar(d, name, 0.0);
    if (type == CUDNN_TYPE_FLOAT) {
      const float f = static_cast<float>(v);
      std::memcpy(elements, &f, sizeof f);
    } else {
      std::memcpy(elements, &v, sizeof v);
    }
    return CUDNN_STATUS_SUCCESS;
  }
  std::memcpy(elements, a->bytes.data(), static_cast<size_t>(n) * ElementBytes(type));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t Execute(cudnnHandle_t handle, const Desc& plan, const Desc& pack) {
  if (plan.type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || pack.type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!plan.finalized || !pack.finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  const Desc* cfg = Ref(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
  const Desc* engine = Ref(*cfg, CUDNN_ATTR_ENGINECFG_ENGINE);
  const Desc* graph = Ref(*engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH);
  const Attr* uids = Get(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
  const Attr* ptrs = Get(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  std::map<int64_t, void*> data;
  for (int64_t i = 0; i < uids->count; ++i) {
    int64_t uid;
    void* p;
    std::memcpy(&uid, uids->bytes.data() + i * sizeof uid, sizeof uid);
    std::memcpy(&p, ptrs->bytes.data() + i * sizeof p, sizeof p);
    data[uid] = p;
  }
  void* workspace = nullptr;
  if (const Attr* ws = Get(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE); ws != nullptr && ws->count > 0) {
    std::memcpy(&workspace, ws->bytes.data(), sizeof workspace);
  }
  if (Int(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, 0) > 0 && workspace == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  // Check every operation before running any.
  std::vector<ConvOp> ops;
  for (const Snapshot& d : Ops(*graph)->descs) {
    ConvOp op;
    const cudnnStatus_t s = ReadConvOp(*d, &op);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    for (int64_t uid : {op.a_uid, op.b_uid, op.out_uid}) {
      auto it = data.find(uid);
      if (it == data.end() || it->second == nullptr) return CUDNN_STATUS_BAD_PARAM;
    }
    ops.push_back(op);
  }
  for (const ConvOp& op : ops) {
    const cudnnStatus_t s =
        Launch(handle, op.kind, op.g, op.alpha, op.beta, data[op.a_uid], data[op.b_uid], data[op.out_uid], workspace);
    if (s != CUDNN_STATUS_SUCCESS) return s;
  }
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace
}  // namespace simcuda_cudnn

using simcuda_cudnn::Desc;

extern "C" {

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* descriptor) {
  if (descriptor == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (!simcuda_cudnn::Creatable(type)) return CUDNN_STATUS_NOT_SUPPORTED;
  auto* d = new Desc;
  d->type = type;
  std::lock_guard lock(simcuda_cudnn::g_mu);
  simcuda_cudnn::Live().insert(d);
  *descriptor = d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  std::lock_guard lock(simcuda_cudnn::g_mu);
  Desc* d = simcuda_cudnn::Lookup(descriptor);
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM;
  simcuda_cudnn::Live().erase(d);
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t descriptor) {
  std::lock_guard lock(simcuda_cudnn::g_mu);
  Desc* d = simcuda_cudnn::Lookup(descriptor);
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM;
  d->attrs.clear();
  d->finalized = false;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  std::lock_guard lock(simcuda_cudnn::g_mu);
  Desc* d = simcuda_cudnn::Lookup(descriptor);
  return d == nullptr ? CUDNN_STATUS_BAD_PARAM : simcuda_cudnn::Finalize(*d);
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void* elements) {
  std::lock_guard lock(simcuda_cudnn::g_mu);
  Desc* d = simcuda_cudnn::Lookup(descriptor);
  return d == nullptr ? CUDNN_STATUS_BAD_PARAM : simcuda_cudnn::SetAttribute(*d, name, type, count, elements);
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                                       void* elements) {
  std::lock_guard lock(simcuda_cudnn::g_mu);
  const Desc* d = simcuda_cudnn::Lookup(descriptor);
  return d == nullptr ? CUDNN_STATUS_BAD_PARAM
                      : simcuda_cudnn::GetAttribute(*d, name, type, requested, count, elements);
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                  cudnnBackendDescriptor_t pack) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  Desc plan_copy, pack_copy;
  {
    // Copies, so that the kernels run without the descriptor lock (another thread may build graphs meanwhile).
    std::lock_guard lock(simcuda_cudnn::g_mu);
    const Desc* p = simcuda_cudnn::Lookup(plan);
    const Desc* v = simcuda_cudnn::Lookup(pack);
    if (p == nullptr || v == nullptr) return CUDNN_STATUS_BAD_PARAM;
    plan_copy = *p;
    pack_copy = *v;
  }
  return simcuda_cudnn::Execute(handle, plan_copy, pack_copy);
}

}  // extern "C"
