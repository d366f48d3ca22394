// conv_trainer: a small CNN (cuDNN convolutions, leaky ReLU, global average pooling, a cuBLAS classifier) trained
// with SGD + momentum on a synthetic classification task, through cuDNN's legacy or backend (graph) API.
#include <cudnn.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/layers.h"
#include "common/trainer.h"
#include "simcuda/cudnn_graph.h"

namespace {

using namespace apps;
namespace k = apps::kernels;

constexpr float kLearningRate = 0.05f;
constexpr float kMomentum = 0.9f;
constexpr int kInputChannels = 3;

struct Options {
  int image = 16;    // input height and width
  int classes = 4;
  std::string api = "legacy";  // or "backend"
} g_options;

void Check(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  std::fprintf(stderr, "conv_trainer: cuDNN error in %s: %s\n", what, cudnnGetErrorString(s));
  std::exit(1);
}

// ---- the CNN's own kernels (NCHW activations: n images x c channels x hw pixels) -------------------------

// z += b[channel]; a = leaky_relu(z).
struct ChannelBiasAct {
  static constexpr const char* kName = "channel_bias_act";
  static void Body(int64_t n, int64_t c, int64_t hw, const float* b, float* z, float* a) {
    for (int64_t i = 0; i < n * c; ++i) {
      for (int64_t p = 0; p < hw; ++p) {
        const float v = z[i * hw + p] + b[i % c];
        z[i * hw + p] = v;
        a[i * hw + p] = v > 0 ? v : k::kLeak * v;
      }
    }
  }
  static void Cost(simcuda_cost* cost, int64_t n, int64_t c, int64_t hw, const float* b, float* z, float* a) {
    cost->flops = 2 * static_cast<double>(n * c * hw);
    cost->bytes = 12 * static_cast<double>(n * c * hw);
    k::Range(cost, b, c);
    k::Range(cost, z, n * c * hw);
    k::Range(cost, a, n * c * hw);
  }
};

// db[channel] = sum over images and pixels of dz, images in order.
struct ChannelSum {
  static constexpr const char* kName = "channel_sum";
  static void Body(int64_t n, int64_t c, int64_t hw, const float* dz, float* db) {
    for (int64_t j = 0; j < c; ++j) db[j] = 0;
    for (int64_t i = 0; i < n * c; ++i) {
      for (int64_t p = 0; p < hw; ++p) db[i % c] += dz[i * hw + p];
    }
  }
  static void Cost(simcuda_cost* cost, int64_t n, int64_t c, int64_t hw, const float* dz, float* db) {
    cost->flops = static_cast<double>(n * c * hw);
    cost->bytes = 4 * static_cast<double>(n * c * hw);
    k::Range(cost, dz, n * c * hw);
    k::Range(cost, db, c);
  }
};

// feat[channel + image * c] = mean over the pixels: a column-major c x n matrix for the classifier GEMM.
struct GlobalAvgPool {
  static constexpr const char* kName = "global_avg_pool";
  static void Body(int64_t n, int64_t c, int64_t hw, const float* a, float* feat) {
    for (int64_t i = 0; i < n * c; ++i) {
      float sum = 0;
      for (int64_t p = 0; p < hw; ++p) sum += a[i * hw + p];
      feat[i] = sum / static_cast<float>(hw);
    }
  }
  static void Cost(simcuda_cost* cost, int64_t n, int64_t c, int64_t hw, const float* a, float* feat) {
    cost->flops = static_cast<double>(n * c * hw);
    cost->bytes = 4 * static_cast<double>(n * c * (hw + 1));
    k::Range(cost, a, n * c * hw);
    k::Range(cost, feat, n * c);
  }
};

struct GlobalAvgPoolBwd {
  static constexpr const char* kName = "global_avg_pool_bwd";
  static void Body(int64_t n, int64_t c, int64_t hw, const float* dfeat, float* da) {
    for (int64_t i = 0; i < n * c; ++i) {
      for (int64_t p = 0; p < hw; ++p) da[i * hw + p] = dfeat[i] / static_cast<float>(hw);
    }
  }
  static void Cost(simcuda_cost* cost, int64_t n, int64_t c, int64_t hw, const float* dfeat, float* da) {
    cost->flops = static_cast<double>(n * c * hw);
    cost->bytes = 4 * static_cast<double>(n * c * (hw + 1));
    k::Range(cost, dfeat, n * c);
    k::Range(cost, da, n * c * hw);
  }
};

// Softmax cross-entropy over column-major classes x n logits: loss = mean of -log p[label];
// dlogits = (p - onehot(label)) / n.
struct SoftmaxXent {
  static constexpr const char* kName = "softmax_xent";
  static void Body(int64_t classes, int64_t n, const float* logits, const float* labels, float* loss,
                   float* dlogits) {
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      const float* z = logits + j * classes;
      float top = z[0];
      for (int64_t i = 1; i < classes; ++i) top = std::max(top, z[i]);
      float total = 0;
      for (int64_t i = 0; i < classes; ++i) total += std::exp(z[i] - top);
      const auto label = static_cast<int64_t>(labels[j]);
      for (int64_t i = 0; i < classes; ++i) {
        const float p = std::exp(z[i] - top) / total;
        dlogits[i + j * classes] = (p - (i == label ? 1.0f : 0.0f)) / static_cast<float>(n);
      }
      sum -= static_cast<double>(z[label] - top - std::log(total));
    }
    *loss = static_cast<float>(sum / static_cast<double>(n));
  }
  static void Cost(simcuda_cost* cost, int64_t classes, int64_t n, const float* logits, const float* labels,
                   float* loss, float* dlogits) {
    cost->flops = 8 * static_cast<double>(classes * n);
    cost->bytes = 4 * static_cast<double>(2 * classes * n + n + 1);
    k::Range(cost, logits, classes * n);
    k::Range(cost, labels, n);
    k::Range(cost, loss, 1);
    k::Range(cost, dlogits, classes * n);
  }
};

const Module<ChannelBiasAct, ChannelSum, GlobalAvgPool, GlobalAvgPoolBwd, SoftmaxXent> g_module;

// ---- convolutions through cuDNN -------------------------------------------------------------------------

enum Pass { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

// One 3 x 3 convolution layer, padding 1: its shape, parameters, and what cuDNN needs for its three passes.
struct Layer {
  int cin = 0, cout = 0, stride = 1;
  int64_t h = 0, w = 0, ho = 0, wo = 0;  // input and output sizes
  Param weight, bias;
  // Legacy API.
  cudnnTensorDescriptor_t x_desc = nullptr, y_desc = nullptr;
  cudnnFilterDescriptor_t w_desc = nullptr;
  cudnnConvolutionDescriptor_t conv_desc = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  cudnnConvolutionBwdFilterAlgo_t filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
  // Backend API: one execution plan per pass.
  std::array<cudnnBackendDescriptor_t, 3> plans = {};
  // Workspace bytes of each pass.
  std::array<size_t, 3> workspace = {};

  int64_t InputFloats(int64_t n) const { return n * cin * h * w; }
  int64_t OutputFloats(int64_t n) const { return n * cout * ho * wo; }
};

// The first algorithm the heuristics say runs, and its workspace.
template <typename Perf, typename Query>
void ChooseAlgo(Query query, const char* what, decltype(Perf::algo)* algo, size_t* workspace) {
  Perf perf[8];
  int returned = 0;
  Check(query(8, &returned, perf), what);
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS) {
      *algo = perf[i].algo;
      *workspace = perf[i].memory;
      return;
    }
  }
  Check(CUDNN_STATUS_NOT_SUPPORTED, what);
}

// ---- the model ------------------------------------------------------------------------------------------

// stem (3 -> width channels), depth - 1 more 3 x 3 convolutions (the middle one with stride 2), each followed
// by a per-channel bias and leaky ReLU; global average pooling; a linear classifier; softmax cross-entropy.
class ConvNet : public Model {
 public:
  explicit ConvNet(const Shape& s) : s_(s) {
    int64_t size = g_options.image;
    for (int l = 0; l < s_.depth; ++l) {
      Layer layer;
      layer.cin = l == 0 ? kInputChannels : s_.width;
      layer.cout = s_.width;
      layer.stride = l == s_.depth / 2 && l > 0 && size >= 8 ? 2 : 1;
      layer.h = layer.w = size;
      layer.ho = layer.wo = (size - 1) / layer.stride + 1;  // 3 x 3, padding 1
      size = layer.ho;
      layers_.push_back(layer);
    }
  }

  void Init(Context& c) override {
    uint64_t id = 0;
    for (Layer& l : layers_) {
      const float scale = std::sqrt(6.0f / static_cast<float>(l.cin * 9));
      l.weight = NewParam(c, int64_t{l.cout} * l.cin * 9, scale, s_.seed, id++, 1);
      l.bias = NewParam(c, l.cout, 0.0f, s_.seed, id++, 1);
      // cuDNN's answer in a real run; in a dry run, an im2col workspace (C * 9 * P * Q floats) for every pass.
      l.workspace.fill(static_cast<size_t>(l.cin) * 9 * static_cast<size_t>(l.ho * l.wo) * sizeof(float));
    }
    classifier_ = NewParam(c, int64_t{g_options.classes} * s_.width, std::sqrt(6.0f / static_cast<float>(s_.width)),
                           s_.seed, id++, 1);
    classifier_bias_ = NewParam(c, g_options.classes, 0.0f, s_.seed, id++, 1);
    if (c.dry()) return;
    Check(cudnnCreate(&dnn_), "cudnnCreate");
    Check(cudnnSetStream(dnn_, c.stream()), "cudnnSetStream");
    for (Layer& l : layers_) Describe(l);
  }

  void Step(Context& c, int iter, float* loss) override {
    const int64_t n = s_.batch;
    const int classes = g_options.classes, width = s_.width;
    float* x = c.New(layers_[0].InputFloats(n));
    float* labels = c.New(n);
    UploadBatch(c, iter, x, labels);

    // Forward: each layer keeps its input and its pre-activation for the backward pass.
    std::vector<std::pair<float*, float*>> saved;  // (input, z)
    float* h = x;
    for (Layer& l : layers_) {
      float* z = c.New(l.OutputFloats(n));
      Convolve(c, l, kForward, h, l.weight.w, z);
      float* a = c.New(l.OutputFloats(n));
      c.Run<ChannelBiasAct>(l.OutputFloats(n), n, int64_t{l.cout}, l.ho * l.wo, static_cast<const float*>(l.bias.w),
                            z, a);
      saved.push_back({h, z});
      h = a;
    }
    const Layer& last = layers_.back();
    const int64_t pixels = last.ho * last.wo;
    float* feat = c.New(int64_t{width} * n);
    c.Run<GlobalAvgPool>(int64_t{width} * n, n, int64_t{width}, pixels, static_cast<const float*>(h), feat);
    c.Free(h);
    float* logits = c.New(int64_t{classes} * n);
    c.Gemm(false, false, classes, static_cast<int>(n), width, classifier_.w, classes, feat, width, logits, classes);
    c.Run<k::Bias>(int64_t{classes} * n, int64_t{classes}, n, static_cast<const float*>(classifier_bias_.w), logits);
    float* dlogits = c.New(int64_t{classes} * n);
    c.Run<SoftmaxXent>(n, int64_t{classes}, n, static_cast<const float*>(logits), static_cast<const float*>(labels),
                       loss, dlogits);
    c.Free(logits);
    c.Free(labels);

    // Backward.
    c.Gemm(false, true, classes, width, static_cast<int>(n), dlogits, classes, feat, width, classifier_.g, classes);
    c.Run<k::RowSum>(int64_t{classes} * n, int64_t{classes}, n, static_cast<const float*>(dlogits),
                     classifier_bias_.g);
    float* dfeat = c.New(int64_t{width} * n);
    c.Gemm(true, false, width, static_cast<int>(n), classes, classifier_.w, classes, dlogits, classes, dfeat, width);
    c.Free(dlogits);
    c.Free(feat);
    float* g = c.New(last.OutputFloats(n));
    c.Run<GlobalAvgPoolBwd>(last.OutputFloats(n), n, int64_t{width}, pixels, static_cast<const float*>(dfeat), g);
    c.Free(dfeat);
    for (int i = static_cast<int>(layers_.size()) - 1; i >= 0; --i) {
      Layer& l = layers_[static_cast<size_t>(i)];
      auto [input, z] = saved[static_cast<size_t>(i)];
      float* dz = c.New(l.OutputFloats(n));
      c.Run<k::BiasActBwd>(l.OutputFloats(n), l.OutputFloats(n), static_cast<const float*>(g),
                           static_cast<const float*>(nullptr), static_cast<const float*>(z), dz);
      c.Free(g);
      c.Free(z);
      c.Run<ChannelSum>(l.OutputFloats(n), n, int64_t{l.cout}, l.ho * l.wo, static_cast<const float*>(dz), l.bias.g);
      Convolve(c, l, kBackwardFilter, input, l.weight.g, dz);
      g = nullptr;
      if (i > 0) {  // the input images need no gradient
        g = c.New(l.InputFloats(n));
        Convolve(c, l, kBackwardData, g, l.weight.w, dz);
      }
      c.Free(dz);
      c.Free(input);
    }

    // Optimizer.
    ForEachParam([&](Param& p) {
      c.Run<k::SgdMomentum>(p.n, p.n, kLearningRate, kMomentum, static_cast<const float*>(p.g), p.s1, p.w);
    });
  }

  std::vector<std::pair<const float*, size_t>> Parameters() const override {
    std::vector<std::pair<const float*, size_t>> all;
    const_cast<ConvNet*>(this)->ForEachParam([&](Param& p) { all.push_back({p.w, static_cast<size_t>(p.n)}); });
    return all;
  }

  void Release(Context& c) override {
    ForEachParam([&](Param& p) { FreeParam(c, p); });
    if (c.dry()) return;
    for (Layer& l : layers_) {
      Check(cudnnDestroyTensorDescriptor(l.x_desc), "cudnnDestroyTensorDescriptor");
      Check(cudnnDestroyTensorDescriptor(l.y_desc), "cudnnDestroyTensorDescriptor");
      Check(cudnnDestroyFilterDescriptor(l.w_desc), "cudnnDestroyFilterDescriptor");
      Check(cudnnDestroyConvolutionDescriptor(l.conv_desc), "cudnnDestroyConvolutionDescriptor");
      for (cudnnBackendDescriptor_t p : l.plans) {
        if (p != nullptr) Check(cudnnBackendDestroyDescriptor(p), "cudnnBackendDestroyDescriptor");
      }
    }
    Check(cudnnDestroy(dnn_), "cudnnDestroy");
  }

 private:
  template <typename F>
  void ForEachParam(F f) {
    for (Layer& l : layers_) {
      f(l.weight);
      f(l.bias);
    }
    f(classifier_);
    f(classifier_bias_);
  }

  // Inputs uniform in [-1, 1) plus a per-class offset pattern over the three channels; labels from a hash.
  void UploadBatch(Context& c, int iter, float* x, float* labels) {
    if (c.dry()) return;
    const int64_t n = s_.batch, pixels = int64_t{g_options.image} * g_options.image;
    std::vector<float> hx(static_cast<size_t>(n * kInputChannels * pixels)), hl(static_cast<size_t>(n));
    const uint64_t stream = (1ull << 32) + static_cast<uint64_t>(iter);
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t label = Mix(s_.seed * 31 + stream * 1000003 + static_cast<uint64_t>(j)) %
                             static_cast<uint64_t>(g_options.classes);
      hl[static_cast<size_t>(j)] = static_cast<float>(label);
      for (int ch = 0; ch < kInputChannels; ++ch) {
        const float offset = ((label >> ch) & 1) != 0 ? 0.5f : -0.5f;
        for (int64_t p = 0; p < pixels; ++p) {
          const size_t i = static_cast<size_t>((j * kInputChannels + ch) * pixels + p);
          hx[i] = 0.5f * Uniform(s_.seed, stream, i) + offset;
        }
      }
    }
    c.Upload(x, hx.data(), hx.size());
    c.Upload(labels, hl.data(), hl.size());
  }

  void Describe(Layer& l) {
    const int n = static_cast<int>(s_.batch);
    Check(cudnnCreateTensorDescriptor(&l.x_desc), "cudnnCreateTensorDescriptor");
    Check(cudnnCreateTensorDescriptor(&l.y_desc), "cudnnCreateTensorDescriptor");
    Check(cudnnCreateFilterDescriptor(&l.w_desc), "cudnnCreateFilterDescriptor");
    Check(cudnnCreateConvolutionDescriptor(&l.conv_desc), "cudnnCreateConvolutionDescriptor");
    Check(cudnnSetTensor4dDescriptor(l.x_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, l.cin, static_cast<int>(l.h),
                                     static_cast<int>(l.w)),
          "cudnnSetTensor4dDescriptor");
    Check(cudnnSetFilter4dDescriptor(l.w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, l.cout, l.cin, 3, 3),
          "cudnnSetFilter4dDescriptor");
    Check(cudnnSetConvolution2dDescriptor(l.conv_desc, 1, 1, l.stride, l.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                          CUDNN_DATA_FLOAT),
          "cudnnSetConvolution2dDescriptor");
    int on = 0, oc = 0, oh = 0, ow = 0;
    Check(cudnnGetConvolution2dForwardOutputDim(l.conv_desc, l.x_desc, l.w_desc, &on, &oc, &oh, &ow),
          "cudnnGetConvolution2dForwardOutputDim");
    if (oh != l.ho || ow != l.wo) Check(CUDNN_STATUS_BAD_PARAM, "output size");
    Check(cudnnSetTensor4dDescriptor(l.y_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow),
          "cudnnSetTensor4dDescriptor");
    if (g_options.api == "backend") {
      // As the cuDNN frontend drives it: tensors with unique ids 'x', 'w', 'y', one plan per pass.
      for (Pass p : {kForward, kBackwardData, kBackwardFilter}) {
        simcuda_graph::ConvSpec spec;
        spec.pass = static_cast<simcuda_graph::ConvPass>(p);
        const int64_t x[4] = {s_.batch, l.cin, l.h, l.w}, w[4] = {l.cout, l.cin, 3, 3},
                      y[4] = {s_.batch, l.cout, l.ho, l.wo};
        std::copy(x, x + 4, spec.x);
        std::copy(w, w + 4, spec.w);
        std::copy(y, y + 4, spec.y);
        spec.pad[0] = spec.pad[1] = 1;
        spec.stride[0] = spec.stride[1] = l.stride;
        int64_t bytes = 0;
        Check(simcuda_graph::BuildPlan(dnn_, {spec}, &l.plans[p], &bytes), "building an execution plan");
        l.workspace[p] = static_cast<size_t>(bytes);
      }
      return;
    }
    ChooseAlgo<cudnnConvolutionFwdAlgoPerf_t>(
        [&](int req, int* ret, cudnnConvolutionFwdAlgoPerf_t* perf) {
          return cudnnGetConvolutionForwardAlgorithm_v7(dnn_, l.x_desc, l.w_desc, l.conv_desc, l.y_desc, req, ret, perf);
        },
        "cudnnGetConvolutionForwardAlgorithm_v7", &l.fwd_algo, &l.workspace[kForward]);
    ChooseAlgo<cudnnConvolutionBwdDataAlgoPerf_t>(
        [&](int req, int* ret, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn_, l.w_desc, l.y_desc, l.conv_desc, l.x_desc, req, ret,
                                                             perf);
        },
        "cudnnGetConvolutionBackwardDataAlgorithm_v7", &l.data_algo, &l.workspace[kBackwardData]);
    ChooseAlgo<cudnnConvolutionBwdFilterAlgoPerf_t>(
        [&](int req, int* ret, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn_, l.x_desc, l.y_desc, l.conv_desc, l.w_desc, req,
                                                               ret, perf);
        },
        "cudnnGetConvolutionBackwardFilterAlgorithm_v7", &l.filter_algo, &l.workspace[kBackwardFilter]);
    size_t bytes = 0;
    Check(cudnnGetConvolutionForwardWorkspaceSize(dnn_, l.x_desc, l.w_desc, l.conv_desc, l.y_desc, l.fwd_algo, &bytes),
          "cudnnGetConvolutionForwardWorkspaceSize");
    if (bytes != l.workspace[kForward]) Check(CUDNN_STATUS_INTERNAL_ERROR, "workspace sizes disagree");
  }

  // One pass of a layer: x-shaped, w-shaped and y-shaped operands (forward: x, w -> y; backward data: dy, w ->
  // dx; backward filter: x, dy -> dw), with a workspace allocated for the call, as frameworks do.
  void Convolve(Context& c, Layer& l, Pass pass, float* x, float* w, float* y) {
    const size_t ws_bytes = l.workspace[pass];
    float* ws = ws_bytes > 0 ? c.New((ws_bytes + sizeof(float) - 1) / sizeof(float)) : nullptr;
    if (!c.dry()) {
      const float one = 1, zero = 0;
      if (g_options.api == "backend") {
        Check(simcuda_graph::Execute(dnn_, l.plans[pass], {'x', 'w', 'y'}, {x, w, y}, ws), "cudnnBackendExecute");
      } else if (pass == kForward) {
        Check(cudnnConvolutionForward(dnn_, &one, l.x_desc, x, l.w_desc, w, l.conv_desc, l.fwd_algo, ws, ws_bytes,
                                      &zero, l.y_desc, y),
              "cudnnConvolutionForward");
      } else if (pass == kBackwardData) {
        Check(cudnnConvolutionBackwardData(dnn_, &one, l.w_desc, w, l.y_desc, y, l.conv_desc, l.data_algo, ws,
                                           ws_bytes, &zero, l.x_desc, x),
              "cudnnConvolutionBackwardData");
      } else {
        Check(cudnnConvolutionBackwardFilter(dnn_, &one, l.x_desc, x, l.y_desc, y, l.conv_desc, l.filter_algo, ws,
                                             ws_bytes, &zero, l.w_desc, w),
              "cudnnConvolutionBackwardFilter");
      }
    }
    c.Free(ws);
  }

  Shape s_;
  std::vector<Layer> layers_;
  Param classifier_, classifier_bias_;
  cudnnHandle_t dnn_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  // The convolutions carry the arithmetic; the elementwise kernels declare only their own few flops.
  apps::g_flops_per_element = 2;
  apps::AppInfo app{"conv_trainer",
                    "conv_trainer: a small CNN (cuDNN 3x3 convolutions, leaky ReLU, global average pooling, a "
                    "cuBLAS classifier), SGD with momentum, synthetic classification; written against the CUDA "
                    "runtime API, cuBLAS and cuDNN. --width counts channels, --depth convolution layers.",
                    4, [](const apps::Shape& s) { return std::make_unique<ConvNet>(s); }};
  app.default_width = 16;
  app.extra_flags = [](CLI::App& cli) {
    cli.add_option("--image", g_options.image, "input height and width")->check(CLI::Range(4, 512))
        ->capture_default_str();
    cli.add_option("--classes", g_options.classes, "classes of the synthetic task")->check(CLI::Range(2, 8))
        ->capture_default_str();
    cli.add_option("--cudnn-api", g_options.api,
                   "legacy: cudnnConvolutionForward/BackwardData/BackwardFilter; backend: one execution plan per "
                   "convolution pass, run with cudnnBackendExecute")
        ->check(CLI::IsMember({"legacy", "backend"}))
        ->capture_default_str();
  };
  return apps::RunTrainer(argc, argv, app);
}
