// The HostOptimizer interface: groups, tensors, owned and caller state, skipped gradients, partial steps,
// validation, the floating-point environment; and the thread pool under it.
#include <gtest/gtest.h>

#include <xmmintrin.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "mpi_shim/host_optimizer/bf16.h"
#include "mpi_shim/host_optimizer/host_optimizer.h"
#include "mpi_shim/host_optimizer/thread_pool.h"

namespace karma::hostopt {
namespace {

std::unique_ptr<HostOptimizer> MakeOpt(int threads = 2, Isa isa = Isa::kAuto, size_t block = 64) {
  Options o;
  o.threads = threads;
  o.isa = isa;
  o.block_elems = block;
  auto opt = HostOptimizer::Create(o);
  EXPECT_TRUE(opt.ok()) << opt.status().ToString();
  return std::move(*opt);
}

TEST(ThreadPool, EveryItemExactlyOnceForManySizesAndWorkers) {
  for (int threads : {1, 2, 3, 8}) {
    auto pool = ThreadPool::Create(threads);
    ASSERT_TRUE(pool.ok());
    for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1000}}) {
      for (int repeat = 0; repeat < 20; ++repeat) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> bad_worker{0};
        (*pool)->ParallelFor(n, [&](size_t i, int w) {
          hits[i].fetch_add(1);
          if (w < 0 || w >= threads) bad_worker.fetch_add(1);
        });
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "item " << i << " threads " << threads;
        EXPECT_EQ(bad_worker.load(), 0);
      }
    }
  }
}

TEST(ThreadPool, RunReachesEveryWorkerAndRejectsZeroThreads) {
  auto pool = ThreadPool::Create(4);
  ASSERT_TRUE(pool.ok());
  std::vector<std::atomic<int>> seen(4);
  (*pool)->Run([&](int w) { seen[static_cast<size_t>(w)].fetch_add(1); });
  for (auto& s : seen) EXPECT_EQ(s.load(), 1);
  EXPECT_FALSE(ThreadPool::Create(0).ok());
}

TEST(HostOptimizer, CreateValidatesOptions) {
  Options o;
  o.block_elems = 100;
  EXPECT_EQ(HostOptimizer::Create(o).status().code(), Code::kInvalidArgument);
  o.block_elems = 0;
  EXPECT_EQ(HostOptimizer::Create(o).status().code(), Code::kInvalidArgument);
  o = Options();
  o.threads = -1;
  EXPECT_EQ(HostOptimizer::Create(o).status().code(), Code::kInvalidArgument);
  o.threads = kMaxThreads + 1;
  EXPECT_EQ(HostOptimizer::Create(o).status().code(), Code::kInvalidArgument);
  o = Options();
  auto opt = HostOptimizer::Create(o);
  ASSERT_TRUE(opt.ok());
  EXPECT_EQ((*opt)->isa(), BestIsa());
  EXPECT_GE((*opt)->threads(), 1);
}

TEST(HostOptimizer, HyperParameterValidationFollowsTorch) {
  auto opt = MakeOpt();
  HyperParams hp = DefaultHyperParams(Algorithm::kSgd);
  hp.nesterov = true;  // without momentum
  EXPECT_EQ(opt->AddGroup(hp).status().code(), Code::kInvalidArgument);
  hp.momentum = 0.9;
  hp.dampening = 0.1;  // Nesterov with dampening
  EXPECT_FALSE(opt->AddGroup(hp).ok());
  hp.dampening = 0;
  EXPECT_TRUE(opt->AddGroup(hp).ok());
  for (auto bad : {+[](HyperParams& h) { h.lr = -1; }, +[](HyperParams& h) { h.beta1 = 1.0; },
                   +[](HyperParams& h) { h.beta2 = -0.1; }, +[](HyperParams& h) { h.eps = -1; },
                   +[](HyperParams& h) { h.weight_decay = -0.1; },
                   +[](HyperParams& h) { h.lr = std::numeric_limits<double>::quiet_NaN(); }}) {
    HyperParams a = DefaultHyperParams(Algorithm::kAdam);
    bad(a);
    Status s = opt->AddGroup(a).status();
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_FALSE(s.message().empty());
  }
  EXPECT_EQ(DefaultHyperParams(Algorithm::kAdamW).weight_decay, 0.01);
  EXPECT_EQ(DefaultHyperParams(Algorithm::kAdam).weight_decay, 0.0);
}

TEST(HostOptimizer, AddTensorValidatesPointers) {
  auto opt = MakeOpt();
  int g = *opt->AddGroup(DefaultHyperParams(Algorithm::kAdam));
  std::vector<float> p(10), grad(10);
  TensorSpec s;
  s.param = nullptr;
  s.numel = 10;
  EXPECT_EQ(opt->AddTensor(g, s).status().code(), Code::kInvalidArgument);
  s.param = reinterpret_cast<char*>(p.data()) + 1;  // misaligned for fp32
  s.grad = grad.data();
  EXPECT_EQ(opt->AddTensor(g, s).status().code(), Code::kInvalidArgument);
  s.param = p.data();
  s.exp_avg = reinterpret_cast<float*>(reinterpret_cast<char*>(p.data()) + 2);
  EXPECT_EQ(opt->AddTensor(g, s).status().code(), Code::kInvalidArgument);
  s.exp_avg = nullptr;
  s.step = -1;
  EXPECT_FALSE(opt->AddTensor(g, s).ok());
  s.step = 0;
  EXPECT_EQ(opt->AddTensor(7, s).status().code(), Code::kNotFound);
  EXPECT_EQ(*opt->AddTensor(g, s), 0);
  s.numel = 0;
  s.param = nullptr;
  EXPECT_EQ(*opt->AddTensor(g, s), 1);  // empty tensors are allowed and never touched
  EXPECT_TRUE(opt->Step().ok());
  EXPECT_EQ(opt->GetState(g, 2).status().code(), Code::kNotFound);
}

TEST(HostOptimizer, OwnsMissingStateAndUsesCallerStateInPlace) {
  auto opt = MakeOpt(2, Isa::kAuto);
  int g = *opt->AddGroup(DefaultHyperParams(Algorithm::kAdam));
  std::vector<float> p(1000, 1.0f), grad(1000, 0.5f), m(1000, 0.0f);
  TensorSpec s;
  s.param = p.data();
  s.grad = grad.data();
  s.numel = p.size();
  s.exp_avg = m.data();
  int t = *opt->AddTensor(g, s);
  auto st = opt->GetState(g, t);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->exp_avg, m.data());
  ASSERT_NE(st->exp_avg_sq, nullptr);
  EXPECT_EQ(st->momentum_buffer, nullptr);
  EXPECT_EQ(st->master, nullptr);
  EXPECT_EQ(st->exp_avg_sq[999], 0.0f);
  EXPECT_EQ(st->step, 0);
  ASSERT_TRUE(opt->Step().ok());
  EXPECT_FLOAT_EQ(m[5], 0.05f);                       // (1 - 0.9) * 0.5, in the caller's array
  EXPECT_FLOAT_EQ(st->exp_avg_sq[5], 0.001f * 0.25f);  // in the optimizer's
  EXPECT_EQ(opt->GetState(g, t)->step, 1);
}

TEST(HostOptimizer, NullGradientSkipsTheTensorAndItsStepCount) {
  auto opt = MakeOpt();
  int g = *opt->AddGroup(DefaultHyperParams(Algorithm::kAdam));
  std::vector<float> a(100, 1.0f), b(100, 1.0f), grad(100, 1.0f);
  TensorSpec s;
  s.param = a.data();
  s.grad = grad.data();
  s.numel = 100;
  int ta = *opt->AddTensor(g, s);
  s.param = b.data();
  s.grad = nullptr;
  int tb = *opt->AddTensor(g, s);
  ASSERT_TRUE(opt->Step().ok());
  EXPECT_LT(a[0], 1.0f);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(opt->GetState(g, ta)->step, 1);
  EXPECT_EQ(opt->GetState(g, tb)->step, 0);
  ASSERT_TRUE(opt->SetPointers(g, tb, nullptr, grad.data()).ok());
  ASSERT_TRUE(opt->Step().ok());
  EXPECT_EQ(opt->GetState(g, tb)->step, 1);
  // b's first step is a first step: moved by lr, like a's first step.
  EXPECT_NEAR(b[0], 1.0f - 1e-3f, 1e-7);
  EXPECT_EQ(opt->GetState(g, tb)->param, b.data());
}

TEST(HostOptimizer, StepGroupsStepsOnlyThoseAndRejectsRepeats) {
  auto opt = MakeOpt();
  std::vector<std::vector<float>> params(3, std::vector<float>(10, 1.0f));
  std::vector<float> grad(10, 1.0f);
  for (int i = 0; i < 3; ++i) {
    HyperParams hp = DefaultHyperParams(Algorithm::kSgd);
    hp.lr = 0.25 * (i + 1);
    int g = *opt->AddGroup(hp);
    TensorSpec s;
    s.param = params[static_cast<size_t>(i)].data();
    s.grad = grad.data();
    s.numel = 10;
    ASSERT_TRUE(opt->AddTensor(g, s).ok());
  }
  const int some[] = {2, 0};
  ASSERT_TRUE(opt->StepGroups(some).ok());
  EXPECT_EQ(params[0][9], 0.75f);
  EXPECT_EQ(params[1][9], 1.0f);
  EXPECT_EQ(params[2][9], 0.25f);
  const int repeated[] = {1, 1};
  EXPECT_EQ(opt->StepGroups(repeated).code(), Code::kInvalidArgument);
  const int missing[] = {3};
  EXPECT_EQ(opt->StepGroups(missing).code(), Code::kNotFound);
  EXPECT_EQ(params[1][9], 1.0f);
}

TEST(HostOptimizer, StepTensorsStepsOnlyThoseAndFindsThemByGradient) {
  // What the data-parallel shim does: find the tensor whose gradient was just reduced, update it alone.
  auto opt = MakeOpt();
  std::vector<std::vector<float>> params(3, std::vector<float>(10, 1.0f)), grads(3, std::vector<float>(10, 1.0f));
  const int g = *opt->AddGroup(DefaultHyperParams(Algorithm::kAdam));
  for (size_t i = 0; i < 3; ++i) {
    TensorSpec s;
    s.param = params[i].data();
    s.grad = grads[i].data();
    s.numel = 10;
    ASSERT_EQ(*opt->AddTensor(g, s), static_cast<int>(i));
  }
  auto owner = opt->FindByGradient(grads[2].data());
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->ref.group, g);
  EXPECT_EQ(owner->ref.tensor, 2);
  EXPECT_EQ(owner->arrays.param, params[2].data());
  EXPECT_NE(owner->arrays.exp_avg, nullptr);  // the state the optimizer allocated
  EXPECT_FALSE(opt->FindByGradient(params[0].data()).has_value());

  const TensorRef two[] = {{g, 2}, {g, 0}};
  ASSERT_TRUE(opt->StepTensors(two).ok());
  EXPECT_LT(params[0][3], 1.0f);
  EXPECT_EQ(params[1][3], 1.0f);
  EXPECT_EQ(params[2][3], params[0][3]);
  EXPECT_EQ(opt->GetState(g, 1)->step, 0);
  EXPECT_EQ(opt->GetState(g, 2)->step, 1);
  // The same as a whole step would have done to them: tensor 1 now catches up with one step of its own.
  const TensorRef one[] = {{g, 1}};
  ASSERT_TRUE(opt->StepTensors(one).ok());
  EXPECT_EQ(params[1][3], params[0][3]);
  const TensorRef repeated[] = {{g, 1}, {g, 1}};
  EXPECT_EQ(opt->StepTensors(repeated).code(), Code::kInvalidArgument);
  const TensorRef missing[] = {{g, 3}};
  EXPECT_EQ(opt->StepTensors(missing).code(), Code::kNotFound);

  // A new gradient array replaces the old one in the lookup.
  std::vector<float> moved(10, 1.0f);
  ASSERT_TRUE(opt->SetPointers(g, 2, nullptr, moved.data()).ok());
  EXPECT_FALSE(opt->FindByGradient(grads[2].data()).has_value());
  EXPECT_EQ(opt->FindByGradient(moved.data())->ref.tensor, 2);
  ASSERT_TRUE(opt->SetPointers(g, 2, nullptr, nullptr).ok());
  EXPECT_FALSE(opt->FindByGradient(moved.data()).has_value());
}

TEST(HostOptimizer, HyperParamsCanChangeExceptBetweenSgdAndAdam) {
  auto opt = MakeOpt();
  int g = *opt->AddGroup(DefaultHyperParams(Algorithm::kSgd));
  std::vector<float> p(10, 1.0f), grad(10, 1.0f);
  TensorSpec s;
  s.param = p.data();
  s.grad = grad.data();
  s.numel = 10;
  int t = *opt->AddTensor(g, s);
  EXPECT_EQ(opt->GetState(g, t)->momentum_buffer, nullptr);
  HyperParams hp = DefaultHyperParams(Algorithm::kSgd);
  hp.lr = 0.5;
  hp.momentum = 0.5;
  ASSERT_TRUE(opt->SetHyperParams(g, hp).ok());
  EXPECT_EQ(opt->GetHyperParams(g)->lr, 0.5);
  ASSERT_NE(opt->GetState(g, t)->momentum_buffer, nullptr);  // allocated when momentum appeared
  ASSERT_TRUE(opt->Step().ok());
  EXPECT_EQ(p[0], 0.5f);  // first momentum step: buf = g
  ASSERT_TRUE(opt->Step().ok());
  EXPECT_EQ(p[0], -0.25f);  // buf = 0.5 + 1
  EXPECT_EQ(opt->SetHyperParams(g, DefaultHyperParams(Algorithm::kAdam)).code(), Code::kInvalidArgument);
  int a = *opt->AddGroup(DefaultHyperParams(Algorithm::kAdam));
  EXPECT_TRUE(opt->SetHyperParams(a, DefaultHyperParams(Algorithm::kAdamW)).ok());
}

TEST(HostOptimizer, CallerMomentumBufferValidityAndSetStep) {
  auto opt = MakeOpt();
  HyperParams hp = DefaultHyperParams(Algorithm::kSgd);
  hp.lr = 0.5;
  hp.momentum = 0.5;
  int g = *opt->AddGroup(hp);
  std::vector<float> p(10, 1.0f), grad(10, 1.0f), buf(10, 2.0f);
  TensorSpec s;
  s.param = p.data();
  s.grad = grad.data();
  s.numel = 10;
  s.momentum_buffer = buf.data();
  s.momentum_buffer_valid = true;  // a buffer loaded from a torch checkpoint: buf = 0.5 * 2 + 1
  ASSERT_TRUE(opt->AddTensor(g, s).ok());
  ASSERT_TRUE(opt->Step().ok());
  EXPECT_EQ(buf[0], 2.0f);
  EXPECT_EQ(p[0], 0.0f);
  ASSERT_TRUE(opt->SetStep(g, -1, 41).ok());
  EXPECT_EQ(opt->GetState(g, 0)->step, 41);
  EXPECT_FALSE(opt->SetStep(g, 0, -2).ok());
}

TEST(HostOptimizer, Bf16MasterStartsFromParamsAndCanBeReloaded) {
  auto opt = MakeOpt(2, Isa::kAuto);
  HyperParams hp = DefaultHyperParams(Algorithm::kSgd);
  hp.lr = 1e-4;
  int g = *opt->AddGroup(hp);
  const size_t n = 300;
  std::vector<uint16_t> p(n, FloatToBf16(1.0f)), grad(n, FloatToBf16(1.0f));
  TensorSpec s;
  s.param = p.data();
  s.grad = grad.data();
  s.numel = n;
  s.dtype = DType::kBF16;
  ASSERT_TRUE(opt->AddTensor(g, s).ok());
  float* master = opt->GetState(g, 0)->master;
  ASSERT_NE(master, nullptr);
  EXPECT_EQ(master[n - 1], 1.0f);
  // 1e-4 is far below half a bf16 ulp of 1 (2^-8): without the master copy ten steps would be lost.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(opt->Step().ok());
  EXPECT_NEAR(master[0], 1.0f - 1e-3f, 1e-6);
  EXPECT_EQ(p[0], FloatToBf16(master[0]));
  EXPECT_EQ(p[0], FloatToBf16(1.0f));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(opt->Step().ok());  // 2e-3 in all: now past the rounding midpoint
  EXPECT_EQ(p[n - 1], FloatToBf16(master[n - 1]));
  EXPECT_NE(p[n - 1], FloatToBf16(1.0f));
  std::fill(p.begin(), p.end(), FloatToBf16(4.0f));
  ASSERT_TRUE(opt->ReloadMaster(g).ok());
  EXPECT_EQ(master[7], 4.0f);
}

TEST(HostOptimizer, ResultsIgnoreTheCallersFlushToZeroMode) {
  const size_t n = 4096;
  std::vector<float> grad(n);
  for (size_t i = 0; i < n; ++i) grad[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>(i + 1);
  std::vector<float> expect(n, 0.0f), got(n, 0.0f);
  HyperParams hp = DefaultHyperParams(Algorithm::kSgd);
  hp.lr = 0.5;
  for (int ftz = 0; ftz < 2; ++ftz) {
    auto opt = MakeOpt(2, Isa::kAuto, 64);
    int g = *opt->AddGroup(hp);
    TensorSpec s;
    s.param = ftz ? got.data() : expect.data();
    s.grad = grad.data();
    s.numel = n;
    ASSERT_TRUE(opt->AddTensor(g, s).ok());
    const unsigned saved = _mm_getcsr();
    if (ftz) _mm_setcsr(saved | 0x8040);  // FTZ | DAZ on the calling thread only
    Status st = opt->Step();
    _mm_setcsr(saved);
    ASSERT_TRUE(st.ok());
  }
  EXPECT_EQ(expect, got);
  EXPECT_NE(expect[n - 1], 0.0f);  // denormal updates survived
}

TEST(Isa, NamesParseAndTheBestIsSupported) {
  for (Isa isa : {Isa::kAuto, Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) EXPECT_EQ(*ParseIsa(IsaName(isa)), isa);
  EXPECT_FALSE(ParseIsa("sse9").ok());
  EXPECT_TRUE(IsaSupported(BestIsa()));
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
  EXPECT_STREQ(KernelsFor(BestIsa()).name, BestIsa() == Isa::kScalar ? "scalar" : IsaName(BestIsa()));
}

}  // namespace
}  // namespace karma::hostopt
