// The scalar reference follows torch.optim: hand-checked values, bias correction, eps and weight-decay
// placement, and a double-precision evaluation of PyTorch's formulas; and bf16 rounding as in c10::BFloat16.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mpi_shim/host_optimizer/bf16.h"
#include "mpi_shim/host_optimizer/host_optimizer.h"

namespace karma::hostopt {
namespace {

uint16_t Bits(float f) { return FloatToBf16(f); }
float FromBits(uint32_t u) { return std::bit_cast<float>(u); }

TEST(Bf16, RoundsToNearestEvenLikePyTorch) {
  EXPECT_EQ(Bits(1.0f), 0x3F80);
  EXPECT_EQ(Bits(FromBits(0x3F808000)), 0x3F80);  // tie, even below: down
  EXPECT_EQ(Bits(FromBits(0x3F818000)), 0x3F82);  // tie, odd below: up
  EXPECT_EQ(Bits(FromBits(0x3F808001)), 0x3F81);  // above the tie: up
  EXPECT_EQ(Bits(FromBits(0x3F807FFF)), 0x3F80);  // below the tie: down
  EXPECT_EQ(Bits(-0.0f), 0x8000);
  EXPECT_EQ(Bits(FromBits(0x00018000)), 0x0002);  // denormals are rounded, not flushed
  EXPECT_EQ(Bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(Bits(std::numeric_limits<float>::max()), 0x7F80);  // past the largest bf16: inf
  EXPECT_EQ(Bits(std::numeric_limits<float>::quiet_NaN()), 0x7FC0);
  EXPECT_EQ(Bits(-std::numeric_limits<float>::quiet_NaN()), 0x7FC0);
  for (uint32_t h : {0x0000u, 0x0001u, 0x3F80u, 0xC2F7u, 0x7F7Fu, 0xFF80u}) {
    EXPECT_EQ(Bits(Bf16ToFloat(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

// Steps one fp32 tensor with the scalar reference; the gradient of step k is grads[k].
std::vector<float> RunReference(const HyperParams& hp, std::vector<float> p,
                                const std::vector<std::vector<float>>& grads) {
  Options o;
  o.isa = Isa::kScalar;
  o.threads = 1;
  auto opt = HostOptimizer::Create(o);
  EXPECT_TRUE(opt.ok());
  auto g = (*opt)->AddGroup(hp);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  std::vector<float> grad(p.size());
  TensorSpec s;
  s.param = p.data();
  s.grad = grad.data();
  s.numel = p.size();
  EXPECT_TRUE((*opt)->AddTensor(*g, s).ok());
  for (const auto& gk : grads) {
    grad = gk;
    EXPECT_TRUE((*opt)->SetPointers(*g, 0, nullptr, grad.data()).ok());
    EXPECT_TRUE((*opt)->Step().ok());
  }
  return p;
}

HyperParams Sgd(double lr, double momentum = 0, double dampening = 0, bool nesterov = false, double wd = 0) {
  HyperParams hp = DefaultHyperParams(Algorithm::kSgd);
  hp.lr = lr;
  hp.momentum = momentum;
  hp.dampening = dampening;
  hp.nesterov = nesterov;
  hp.weight_decay = wd;
  return hp;
}

// Values below are exact in binary, so the expected results are exact.
TEST(ReferenceSgd, PlainMomentumNesterovDampeningWeightDecay) {
  const std::vector<std::vector<float>> ones(3, {1.0f});
  EXPECT_EQ(RunReference(Sgd(0.5), {1.0f}, {{0.25f}}), std::vector<float>{0.875f});
  // buf: 1, 1.5, 1.75 -> p: 0.5, -0.25, -1.125
  EXPECT_EQ(RunReference(Sgd(0.5, 0.5), {1.0f}, ones), std::vector<float>{-1.125f});
  // Nesterov: d = g + 0.5 * buf: 1.5, 1.75 -> p: 0.25, -0.625
  EXPECT_EQ(RunReference(Sgd(0.5, 0.5, 0, true), {1.0f}, {{1.0f}, {1.0f}}), std::vector<float>{-0.625f});
  // Dampening is not applied on the first step: buf 1, then 0.5 + 0.5 = 1 -> p = 1 - 0.5 - 0.5
  EXPECT_EQ(RunReference(Sgd(0.5, 0.5, 0.5), {1.0f}, {{1.0f}, {1.0f}}), std::vector<float>{0.0f});
  // L2 weight decay joins the gradient: d = 0 + 0.5 * 2
  EXPECT_EQ(RunReference(Sgd(0.5, 0, 0, false, 0.5), {2.0f}, {{0.0f}}), std::vector<float>{1.5f});
  HyperParams max = Sgd(0.5);
  max.maximize = true;
  EXPECT_EQ(RunReference(max, {1.0f}, {{0.25f}}), std::vector<float>{1.125f});
}

HyperParams Adam(Algorithm a, double lr, double wd = 0, double eps = 1e-8) {
  HyperParams hp = DefaultHyperParams(a);
  hp.lr = lr;
  hp.weight_decay = wd;
  hp.eps = eps;
  return hp;
}

// With bias correction, a constant gradient moves every parameter by lr * sign(g) on every step (m_hat = g,
// v_hat = g^2): a wrong power t in either correction shows up in the first steps.
TEST(ReferenceAdam, BiasCorrectionMakesEachStepLrTimesSign) {
  const std::vector<float> g = {3.0f, -0.02f, 0.5f, -250.0f};
  for (int steps : {1, 2, 10}) {
    std::vector<std::vector<float>> grads(static_cast<size_t>(steps), g);
    for (Algorithm a : {Algorithm::kAdam, Algorithm::kAdamW}) {
      std::vector<float> p = RunReference(Adam(a, 0.01, 0), {0, 0, 0, 0}, grads);
      for (size_t i = 0; i < g.size(); ++i) {
        const double want = -0.01 * steps * (g[i] > 0 ? 1 : -1);
        EXPECT_NEAR(p[i], want, 1e-5 * std::abs(want)) << AlgorithmName(a) << " steps " << steps << " g " << g[i];
      }
    }
  }
}

TEST(ReferenceAdam, EpsIsAddedAfterTheBiasCorrectedSquareRoot) {
  // torch: denom = sqrt(v) / sqrt(1 - beta2^t) + eps; on step 1 that is |g| + eps, so g == eps halves the step.
  // eps inside the square root would give ~1e-4 of the step, eps before the correction ~3e-2.
  std::vector<float> p = RunReference(Adam(Algorithm::kAdam, 1.0, 0, 1e-8), {0.0f}, {{1e-8f}});
  EXPECT_NEAR(p[0], -0.5, 1e-6);
}

TEST(ReferenceAdam, WeightDecayIsL2ForAdamAndDecoupledForAdamW) {
  // g = 0, p = 1, wd = 0.1: Adam sees a gradient 0.1 and steps by -lr; AdamW only scales p by 1 - lr * wd.
  std::vector<float> adam = RunReference(Adam(Algorithm::kAdam, 0.01, 0.1), {1.0f}, {{0.0f}});
  EXPECT_NEAR(adam[0], 0.99, 1e-6);
  std::vector<float> adamw = RunReference(Adam(Algorithm::kAdamW, 0.01, 0.1), {1.0f}, {{0.0f}});
  EXPECT_EQ(adamw[0], 1.0f * static_cast<float>(1 - 0.01 * 0.1));
  HyperParams max = Adam(Algorithm::kAdam, 0.01);
  max.maximize = true;
  EXPECT_NEAR(RunReference(max, {0.0f}, {{2.0f}})[0], 0.01, 1e-7);
}

// torch.optim's single-tensor algorithms, written out in double precision.
void TextbookStep(const HyperParams& hp, int t, double& p, double g, double& m, double& v, double& buf) {
  if (hp.maximize) g = -g;
  if (hp.algorithm == Algorithm::kSgd) {
    if (hp.weight_decay != 0) g += hp.weight_decay * p;
    if (hp.momentum != 0) {
      buf = t == 1 ? g : hp.momentum * buf + (1 - hp.dampening) * g;
      g = hp.nesterov ? g + hp.momentum * buf : buf;
    }
    p -= hp.lr * g;
    return;
  }
  if (hp.algorithm == Algorithm::kAdamW) p *= 1 - hp.lr * hp.weight_decay;
  if (hp.algorithm == Algorithm::kAdam && hp.weight_decay != 0) g += hp.weight_decay * p;
  m = hp.beta1 * m + (1 - hp.beta1) * g;
  v = hp.beta2 * v + (1 - hp.beta2) * g * g;
  const double step_size = hp.lr / (1 - std::pow(hp.beta1, t));
  const double denom = std::sqrt(v) / std::sqrt(1 - std::pow(hp.beta2, t)) + hp.eps;
  p -= step_size * m / denom;
}

// The fp32 reference against exact-ish arithmetic over 20 steps of random data. Each fp32 step rounds the
// parameter once (2^-24 |p|) and the update a handful of times; an Adam update is at most about 3.2 lr
// (|m_hat / sqrt(v_hat)| <= (1 - beta1) / sqrt(1 - beta2)), an SGD one about lr |d|. The bound below,
// steps * (2^-23 |p| + 2^-18 * lr * scale), leaves a margin of about 8 over those sources.
TEST(ReferenceAllAlgorithms, MatchesDoublePrecisionFormulasWithinRounding) {
  constexpr int kSteps = 20;
  constexpr size_t kN = 2000;
  std::vector<HyperParams> cases = {Sgd(0.05), Sgd(0.05, 0.9, 0.1, false, 0.01), Sgd(0.05, 0.9, 0, true, 0.01),
                                    Adam(Algorithm::kAdam, 0.01, 0.05), Adam(Algorithm::kAdamW, 0.01, 0.05)};
  cases.back().maximize = true;
  for (const HyperParams& hp : cases) {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    std::vector<float> p0(kN);
    for (float& x : p0) x = normal(rng);
    std::vector<std::vector<float>> grads(kSteps, std::vector<float>(kN));
    for (auto& gk : grads)
      for (float& x : gk) x = normal(rng);
    const std::vector<float> got = RunReference(hp, p0, grads);
    double worst = 0;
    for (size_t i = 0; i < kN; ++i) {
      double p = p0[i], m = 0, v = 0, buf = 0, max_d = 0;
      for (int t = 1; t <= kSteps; ++t) {
        TextbookStep(hp, t, p, grads[static_cast<size_t>(t - 1)][i], m, v, buf);
        max_d = std::max(max_d, std::abs(static_cast<double>(grads[static_cast<size_t>(t - 1)][i])));
      }
      // SGD with momentum 0.9 accumulates up to 1 / (1 - 0.9) = 10 gradients, Nesterov one more.
      const double scale = hp.algorithm == Algorithm::kSgd ? 11 * (max_d + 1) : 4;
      const double bound = kSteps * (std::ldexp(std::abs(p) + 1e-30, -23) + std::ldexp(hp.lr * scale, -18));
      EXPECT_LE(std::abs(got[i] - p), bound) << AlgorithmName(hp.algorithm) << " i=" << i;
      worst = std::max(worst, std::abs(got[i] - p) / bound);
    }
    RecordProperty("case" + std::to_string(&hp - cases.data()) + "_" + AlgorithmName(hp.algorithm) + "_worst_fraction_of_bound",
                   std::to_string(worst));
  }
}

TEST(StepScalars, RoundedOnceFromDoubleLikePyTorch) {
  HyperParams hp = Adam(Algorithm::kAdam, 1e-3);
  StepScalars s = MakeStepScalars(hp, 3, false);
  EXPECT_EQ(s.neg_step_size, static_cast<float>(-(1e-3 / (1 - std::pow(0.9, 3.0)))));
  EXPECT_EQ(s.bias_correction2_sqrt, static_cast<float>(std::sqrt(1 - std::pow(0.999, 3.0))));
  EXPECT_EQ(s.one_minus_beta2, static_cast<float>(1 - 0.999));
  EXPECT_NE(s.one_minus_beta2, 1.0f - static_cast<float>(0.999));  // the difference the rounding order makes
  EXPECT_FALSE(s.use_weight_decay);
  hp.algorithm = Algorithm::kAdamW;
  hp.weight_decay = 0.01;
  s = MakeStepScalars(hp, 1, false);
  EXPECT_FALSE(s.use_weight_decay);
  EXPECT_EQ(s.decay_factor, static_cast<float>(1 - 1e-3 * 0.01));
}

}  // namespace
}  // namespace karma::hostopt
