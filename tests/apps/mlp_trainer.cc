// mlp_trainer: a linear chain of fully connected layers (leaky ReLU, dropout) trained with SGD + momentum.
#include <cmath>
#include <functional>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/layers.h"
#include "common/trainer.h"
#if APPS_MPI
#include "common/mpi_exchange.h"
#endif

namespace {

using namespace apps;
namespace k = apps::kernels;

constexpr float kLearningRate = 0.05f;
constexpr float kMomentum = 0.9f;

// --inplace-input (a variant for KARMA's recompute validation): every layer after the first halves its input in
// place right after its GEMM has read it (the backward pass then uses the halved input). Running the GEMM again
// later reads the halved input and produces another output, so a recompute that re-runs it must be caught and
// rejected.
bool g_inplace_input = false;

struct HalveInPlace {
  static constexpr const char* kName = "halve_in_place";
  static void Body(int64_t n, float* x) {
    for (int64_t i = 0; i < n; ++i) x[i] *= 0.5f;
  }
  static void Cost(simcuda_cost* c, int64_t n, float* x) {
    c->flops = static_cast<double>(n);
    c->bytes = 8 * static_cast<double>(n);
    k::Range(c, x, n);
  }
};
// --inplace-hidden: the same halving, but the kernel gets its buffer's address bit-inverted, so that no parameter
// of the launch names the buffer. A runtime that finds buffers by scanning parameters for device pointers does not
// see the write and may plan to re-run the GEMM on the halved input; only the validation of that recompute (the
// recomputed buffer compared with the original) can catch it.
bool g_inplace_hidden = false;

struct HalveHidden {
  static constexpr const char* kName = "halve_hidden";
  static float* Decode(uint64_t key) { return reinterpret_cast<float*>(~key); }
  static void Body(int64_t n, uint64_t key) { HalveInPlace::Body(n, Decode(key)); }
  static void Cost(simcuda_cost* c, int64_t n, uint64_t key) { HalveInPlace::Cost(c, n, Decode(key)); }
};
// --read-hidden: a read through such a parameter. The last layer's backward (the first of the backward pass) reads
// the first layer's saved input, the batch, through its bit-inverted address and adds 1/16 of its mean over the
// global batch to its bias gradient, so that a wrong read changes the later losses and the checksum. Parameter
// scanning records no use there: a plan moves the batch away in the forward pass and brings it back only for the
// first layer's backward. Safe only while it is swapped (its bytes on the host, paged back on demand under managed
// memory), not discarded for a recompute. The batch is the one saved input no recompute can rebuild (a copy from the
// host writes it), so a plan keeps or swaps it; layer 0's output read this way gives NaN losses at 2x of 64 MiB,
// where the plan discards and recomputes it (tests/e2e's case read_hidden checks the plan).
bool g_read_hidden = false;
constexpr float kReadHiddenWeight = 0.0625f;

struct ReadHidden {
  static constexpr const char* kName = "read_hidden";
  static const float* Decode(uint64_t key) { return reinterpret_cast<const float*>(~key); }
  static void Body(int64_t rows, int64_t cols, float scale, uint64_t key, float* db) {
    const float* x = Decode(key);
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t i = 0; i < rows; ++i) db[i] += scale * x[i + j * rows];
    }
  }
  static void Cost(simcuda_cost* c, int64_t rows, int64_t cols, float /*scale*/, uint64_t key, float* db) {
    c->flops = 2 * static_cast<double>(rows) * static_cast<double>(cols);
    c->bytes = 4 * (static_cast<double>(rows) * static_cast<double>(cols) + 2 * static_cast<double>(rows));
    k::Range(c, Decode(key), rows * cols);
    k::Range(c, db, rows);
  }
};
const Module<HalveInPlace, HalveHidden, ReadHidden> kMlpModule;

class Mlp : public Model {
 public:
  explicit Mlp(const Shape& s) : s_(s) {}

  void Init(Context& c) override {
    const int w = s_.width;
    for (int l = 0; l < s_.depth; ++l) {
      weights_.push_back(NewParam(c, int64_t{w} * w, std::sqrt(6.0f / static_cast<float>(w)), s_.seed, 2 * l, 1));
      biases_.push_back(NewParam(c, w, 0.0f, s_.seed, 2 * l + 1, 1));
    }
  }

  void ForwardBackward(Context& c, int iter, int shard, float* loss, const BackwardHooks& hooks) override {
    const int w = s_.width;
    const int b = static_cast<int>(s_.batch);
    const int64_t n = int64_t{w} * b;
    const int depth = s_.depth;

    float* x = c.New(n);
    float* target = c.New(n);
    UploadBatch(c, s_, iter, shard, x, target);

    // Forward: every layer keeps its input, its pre-activation and its dropout mask for the backward pass.
    struct Saved {
      float* input;
      float* z;
      float* mask;
    };
    std::vector<Saved> saved(static_cast<size_t>(depth));
    float* h = x;
    for (int l = 0; l < depth; ++l) {
      float* z = c.New(n);
      c.Gemm(false, false, w, b, w, weights_[l].w, w, h, w, z, w);
      if (g_inplace_input && l > 0) c.Run<HalveInPlace>(n, n, h);
      if (g_inplace_hidden && l > 0) c.Run<HalveHidden>(n, n, ~reinterpret_cast<uint64_t>(h));
      float* a = c.New(n);
      c.Run<k::BiasActFwd>(n, int64_t{w}, int64_t{b}, static_cast<const float*>(biases_[l].w), z, a);
      float* mask = nullptr;
      float* out = a;
      if (l + 1 < depth) {
        mask = c.New(n);
        out = c.New(n);
        c.Run<k::Dropout>(n, n, n * shard, Mix(s_.seed + 7919 * static_cast<uint64_t>(iter) + static_cast<uint64_t>(l)),
                    static_cast<const float*>(a), mask, out);
        c.Free(a);
      }
      saved[l] = {h, z, mask};
      h = out;
    }
    float* dy = c.New(n);
    c.Run<k::MseLoss>(n, n, n * s_.shards, static_cast<const float*>(h), static_cast<const float*>(target), loss, dy);
    c.Free(h);
    c.Free(target);
    if (hooks.begin) hooks.begin();

    // Backward, releasing what each layer kept as soon as its gradients are done.
    float* g = dy;
    for (int l = depth - 1; l >= 0; --l) {
      const Saved& s = saved[l];
      float* dz = c.New(n);
      c.Run<k::BiasActBwd>(n, n, static_cast<const float*>(g), static_cast<const float*>(s.mask),
                     static_cast<const float*>(s.z), dz);
      c.Free(g);
      c.Free(s.z);
      c.Free(s.mask);
      c.Gemm(false, true, w, w, b, dz, w, s.input, w, weights_[l].g, w);
      c.Run<k::RowSum>(n, int64_t{w}, int64_t{b}, static_cast<const float*>(dz), biases_[l].g);
      if (g_read_hidden && l == depth - 1) {
        const float scale = kReadHiddenWeight / (static_cast<float>(b) * static_cast<float>(s_.shards));
        c.Run<ReadHidden>(n, int64_t{w}, int64_t{b}, scale,
                          ~reinterpret_cast<uint64_t>(saved[0].input), biases_[l].g);
      }
      g = nullptr;
      if (l > 0) {
        g = c.New(n);
        c.Gemm(true, false, w, b, w, weights_[l].w, w, dz, w, g, w);
      }
      c.Free(dz);
      c.Free(s.input);
      if (hooks.ready) {
        hooks.ready(weights_[l]);
        hooks.ready(biases_[l]);
      }
    }
  }

  void Update(Context& c, int iter) override {
    for (int l = 0; l < s_.depth; ++l) {
      for (Param* p : {&weights_[l], &biases_[l]}) {
        c.Run<k::SgdMomentum>(p->n, p->n, kLearningRate, kMomentum, static_cast<const float*>(p->g), p->s1, p->w);
      }
    }
  }

  void ForEachParam(const std::function<void(Param&)>& f) override {
    for (size_t l = 0; l < weights_.size(); ++l) {
      f(weights_[l]);
      f(biases_[l]);
    }
  }

  // torch.optim.SGD(lr, momentum): the device kernel's update, as PyTorch defines it.
  OptimizerSpec optimizer() const override { return {0, kLearningRate, kMomentum}; }

  void Release(Context& c) override {
    for (Param& p : weights_) FreeParam(c, p);
    for (Param& p : biases_) FreeParam(c, p);
  }

 private:
  Shape s_;
  std::vector<Param> weights_, biases_;
};

}  // namespace

int main(int argc, char** argv) {
  apps::AppInfo app{"mlp_trainer",
                    "mlp_trainer: a chain of fully connected layers (leaky ReLU, dropout), SGD with momentum, "
                    "synthetic data; written against the CUDA runtime API and cuBLAS.",
                    16, [](const apps::Shape& s) { return std::make_unique<Mlp>(s); },
                    {}};
#if APPS_MPI
  app.mpi = apps::MakeMpiExchange;
#endif
  app.extra_flags = [](CLI::App& cli) {
    auto* visible =
        cli.add_flag("--inplace-input", g_inplace_input, "variant: every layer after the first halves its input in place");
    cli.add_flag("--inplace-hidden", g_inplace_hidden,
                 "variant: the same, through a kernel parameter that does not look like a pointer")
        ->excludes(visible);
    cli.add_flag("--read-hidden", g_read_hidden,
                 "variant: the last layer's backward reads the first layer's saved input (the batch) through a "
                 "kernel parameter that does not look like a pointer");
  };
  return apps::RunTrainer(argc, argv, app);
}
