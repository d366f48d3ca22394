// skipnet_trainer: residual blocks in an encoder/decoder with long U-Net-style skips, trained with Adam.
#include <cmath>
#include <functional>
#include <vector>

#include "common/layers.h"
#include "common/trainer.h"
#if APPS_MPI
#include "common/mpi_exchange.h"
#endif

namespace {

using namespace apps;
namespace k = apps::kernels;

constexpr float kLearningRate = 1e-3f;

// stem -> encoder blocks e[0..S-1] -> decoder blocks -> head. Decoder block j adds the skip e[S-2-j] to its
// input; the last one adds the stem's output h0, which therefore lives through the whole forward pass.
// A residual block: out = u + W2 * leaky(W1 * u + b1) + b2.
class SkipNet : public Model {
 public:
  explicit SkipNet(const Shape& s) : s_(s), blocks_per_half_(std::max(1, s.depth / 2)) {}

  void Init(Context& c) override {
    const int w = s_.width;
    const float scale = std::sqrt(6.0f / static_cast<float>(w));
    uint64_t id = 0;
    auto linear = [&](float weight_scale) {
      Linear l{NewParam(c, int64_t{w} * w, weight_scale, s_.seed, id, 2), NewParam(c, w, 0.0f, s_.seed, id + 1, 2)};
      id += 2;
      return l;
    };
    stem_ = linear(scale);
    // The second layer of a block starts small, so each block begins close to the identity.
    for (int i = 0; i < 2 * blocks_per_half_; ++i) blocks_.push_back({linear(scale), linear(0.1f * scale)});
    head_ = linear(0.1f * scale);
  }

  void ForwardBackward(Context& c, int iter, int shard, float* loss, const BackwardHooks& hooks) override {
    const int64_t n = int64_t{s_.width} * s_.batch;
    const int half = blocks_per_half_;
    float* x = c.New(n);
    float* target = c.New(n);
    UploadBatch(c, s_, iter, shard, x, target);

    // Forward.
    float* z0 = c.New(n);
    Matmul(c, stem_, x, z0);
    float* h0 = c.New(n);
    c.Run<k::BiasActFwd>(n, int64_t{s_.width}, s_.batch, static_cast<const float*>(stem_.b.w), z0, h0);
    std::vector<float*> enc(half);
    std::vector<Saved> saved(2 * half);
    for (int i = 0; i < half; ++i) enc[i] = Block(c, blocks_[i], i == 0 ? h0 : enc[i - 1], &saved[i]);
    float* d = enc[half - 1];
    for (int j = 0; j < half; ++j) {
      float* skip = j + 1 < half ? enc[half - 2 - j] : h0;
      float* u = c.New(n);
      c.Run<k::Add>(n, n, static_cast<const float*>(d), static_cast<const float*>(skip), u);
      c.Free(d);  // a decoder input lives on as u; the bottleneck e[S-1] is no skip source
      d = Block(c, blocks_[half + j], u, &saved[half + j]);
    }
    float* y = c.New(n);
    Matmul(c, head_, d, y);
    c.Run<k::Bias>(n, int64_t{s_.width}, s_.batch, static_cast<const float*>(head_.b.w), y);
    float* dy = c.New(n);
    c.Run<k::MseLoss>(n, n, n * s_.shards, static_cast<const float*>(y), static_cast<const float*>(target), loss, dy);
    c.Free(y);
    c.Free(target);

    // Backward.
    if (hooks.begin) hooks.begin();
    float* g = Backprop(c, head_, d, dy);
    c.Free(dy);
    c.Free(d);
    Ready(hooks, head_);
    std::vector<float*> skip_grad(half, nullptr);  // gradients reaching e[0..S-2] (index S-1: h0) through skips
    for (int j = half - 1; j >= 0; --j) {
      float* gu = BlockBackward(c, blocks_[half + j], saved[half + j], g);
      Ready(hooks, blocks_[half + j]);
      c.Free(saved[half + j].u);
      skip_grad[j + 1 < half ? half - 2 - j : half - 1] = Duplicate(c, gu, n);
      g = gu;  // the same gradient reaches the decoder's input
    }
    for (int i = half - 1; i >= 0; --i) {
      if (i + 1 < half) {  // e[i] feeds encoder block i + 1 and a skip
        c.Run<k::Accumulate>(n, n, static_cast<const float*>(skip_grad[i]), g);
        c.Free(skip_grad[i]);
      }
      float* gu = BlockBackward(c, blocks_[i], saved[i], g);
      Ready(hooks, blocks_[i]);
      if (i > 0) c.Free(saved[i].u);  // e[i - 1]; block 0's input is h0
      g = gu;
    }
    c.Run<k::Accumulate>(n, n, static_cast<const float*>(skip_grad[half - 1]), g);
    c.Free(skip_grad[half - 1]);
    float* dz0 = c.New(n);
    c.Run<k::BiasActBwd>(n, n, static_cast<const float*>(g), static_cast<const float*>(nullptr),
                         static_cast<const float*>(z0), dz0);
    c.Free(g);
    c.Free(z0);
    c.Free(h0);
    WeightGrads(c, stem_, x, dz0);
    c.Free(dz0);
    c.Free(x);
    Ready(hooks, stem_);
  }

  void Update(Context& c, int iter) override {
    const float t = static_cast<float>(iter + 1);
    const float c1 = 1 - std::pow(0.9f, t), c2 = 1 - std::pow(0.999f, t);
    ForEachParam([&](Param& p) {
      c.Run<k::Adam>(p.n, p.n, kLearningRate, c1, c2, static_cast<const float*>(p.g), p.s1, p.s2, p.w);
    });
  }

  void ForEachParam(const std::function<void(Param&)>& f) override {
    for (Linear* l : {&stem_, &head_}) {
      f(l->w);
      f(l->b);
    }
    for (Residual& r : blocks_) {
      for (Linear* l : {&r.first, &r.second}) {
        f(l->w);
        f(l->b);
      }
    }
  }

  // torch.optim.Adam(lr) with its default betas and eps, which the device kernel uses too.
  OptimizerSpec optimizer() const override { return {1, kLearningRate, 0}; }

  void Release(Context& c) override {
    ForEachParam([&](Param& p) { FreeParam(c, p); });
  }

 private:
  struct Linear {
    Param w, b;
  };
  struct Residual {
    Linear first, second;
  };
  struct Saved {
    float* u;   // block input
    float* z1;  // pre-activation
    float* a1;  // activation
  };

  static void Ready(const BackwardHooks& hooks, Linear& l) {
    if (!hooks.ready) return;
    hooks.ready(l.w);
    hooks.ready(l.b);
  }
  static void Ready(const BackwardHooks& hooks, Residual& r) {
    Ready(hooks, r.second);
    Ready(hooks, r.first);
  }

  void Matmul(Context& c, const Linear& l, const float* in, float* out) {
    const int w = s_.width, b = static_cast<int>(s_.batch);
    c.Gemm(false, false, w, b, w, l.w.w, w, in, w, out, w);
  }

  float* Block(Context& c, const Residual& r, float* u, Saved* saved) {
    const int64_t n = int64_t{s_.width} * s_.batch;
    float* z1 = c.New(n);
    Matmul(c, r.first, u, z1);
    float* a1 = c.New(n);
    c.Run<k::BiasActFwd>(n, int64_t{s_.width}, s_.batch, static_cast<const float*>(r.first.b.w), z1, a1);
    float* out = c.New(n);
    Matmul(c, r.second, a1, out);
    c.Run<k::BiasResidual>(n, int64_t{s_.width}, s_.batch, static_cast<const float*>(r.second.b.w),
                     static_cast<const float*>(u), out);
    *saved = {u, z1, a1};
    return out;
  }

  // dW = dz * in^T, db = row sums of dz.
  void WeightGrads(Context& c, Linear& l, const float* in, const float* dz) {
    const int w = s_.width, b = static_cast<int>(s_.batch);
    c.Gemm(false, true, w, w, b, dz, w, in, w, l.w.g, w);
    c.Run<k::RowSum>(int64_t{w} * b, int64_t{w}, int64_t{b}, dz, l.b.g);
  }

  // Weight gradients of a linear layer and the gradient of its input (a new tensor).
  float* Backprop(Context& c, Linear& l, const float* in, const float* dz) {
    const int w = s_.width, b = static_cast<int>(s_.batch);
    WeightGrads(c, l, in, dz);
    float* gin = c.New(int64_t{w} * b);
    c.Gemm(true, false, w, b, w, l.w.w, w, dz, w, gin, w);
    return gin;
  }

  // Consumes the gradient of the block's output; returns the gradient of its input.
  float* BlockBackward(Context& c, Residual& r, const Saved& s, float* gout) {
    const int64_t n = int64_t{s_.width} * s_.batch;
    float* ga1 = Backprop(c, r.second, s.a1, gout);
    c.Free(s.a1);
    float* dz1 = c.New(n);
    c.Run<k::BiasActBwd>(n, n, static_cast<const float*>(ga1), static_cast<const float*>(nullptr),
                         static_cast<const float*>(s.z1), dz1);
    c.Free(ga1);
    c.Free(s.z1);
    float* gu = Backprop(c, r.first, s.u, dz1);
    c.Free(dz1);
    c.Run<k::Accumulate>(n, n, static_cast<const float*>(gout), gu);  // the residual path
    c.Free(gout);
    return gu;
  }

  float* Duplicate(Context& c, const float* src, int64_t n) {
    float* dst = c.New(n);
    c.Copy(dst, src, static_cast<size_t>(n));
    return dst;
  }

  Shape s_;
  int blocks_per_half_;
  Linear stem_, head_;
  std::vector<Residual> blocks_;
};

}  // namespace

int main(int argc, char** argv) {
  apps::AppInfo app{"skipnet_trainer",
                    "skipnet_trainer: residual blocks in an encoder/decoder with long U-Net-style skip "
                    "connections, Adam, synthetic data; written against the CUDA runtime API and cuBLAS. "
                    "--depth counts residual blocks (half encoder, half decoder).",
                    8, [](const apps::Shape& s) { return std::make_unique<SkipNet>(s); },
                    {}};
#if APPS_MPI
  app.mpi = apps::MakeMpiExchange;
#endif
  return apps::RunTrainer(argc, argv, app);
}
