// The AVX2 and AVX-512 kernels, split into blocks over 1 to 5 threads, give the scalar reference's bits for
// every algorithm and option, fp32 and bf16, odd lengths, misaligned arrays and special values. Blocks of
// 4096 elements reach the prefetching main loop (it stops 512 elements before a block ends).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mpi_shim/host_optimizer/host_optimizer.h"

namespace karma::hostopt {
namespace {

struct Config {
  std::string name;
  HyperParams hp;
};

std::vector<Config> Configs() {
  std::vector<Config> out;
  auto sgd = [](double wd, double mom, double damp, bool nesterov, bool maximize) {
    HyperParams hp = DefaultHyperParams(Algorithm::kSgd);
    hp.lr = 0.05;
    hp.weight_decay = wd;
    hp.momentum = mom;
    hp.dampening = damp;
    hp.nesterov = nesterov;
    hp.maximize = maximize;
    return hp;
  };
  out.push_back({"sgd", sgd(0, 0, 0, false, false)});
  out.push_back({"sgd_wd", sgd(0.01, 0, 0, false, false)});
  out.push_back({"sgd_momentum", sgd(0, 0.9, 0, false, false)});
  out.push_back({"sgd_momentum_dampening_wd", sgd(0.02, 0.9, 0.1, false, false)});
  out.push_back({"sgd_nesterov", sgd(0, 0.9, 0, true, false)});
  out.push_back({"sgd_nesterov_wd_maximize", sgd(0.01, 0.8, 0, true, true)});
  for (Algorithm a : {Algorithm::kAdam, Algorithm::kAdamW}) {
    for (double wd : {0.0, 0.05}) {
      for (bool maximize : {false, true}) {
        HyperParams hp = DefaultHyperParams(a);
        hp.lr = 0.01;
        hp.weight_decay = wd;
        hp.maximize = maximize;
        hp.beta1 = 0.85;
        hp.eps = 1e-6;
        out.push_back({std::string(AlgorithmName(a)) + (wd != 0 ? "_wd" : "") + (maximize ? "_maximize" : ""), hp});
      }
    }
  }
  return out;
}

// Lengths around the vector widths (8, 16) and block size (64), each placed one element off alignment too.
constexpr size_t kLengths[] = {1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 129, 1000, 4099};

// One registered tensor's arrays; the optimizer gets caller-owned state so both runs can be compared.
struct Arrays {
  std::vector<float> f32_storage;
  std::vector<uint16_t> bf16_storage;
  std::vector<float> grad_f32_storage;
  std::vector<uint16_t> grad_bf16_storage;
  std::vector<float> m, v, buf, master;
  size_t offset = 0, n = 0;
  DType dtype = DType::kF32;

  void* param() { return dtype == DType::kF32 ? static_cast<void*>(f32_storage.data() + offset)
                                               : static_cast<void*>(bf16_storage.data() + offset); }
  void* grad() { return dtype == DType::kF32 ? static_cast<void*>(grad_f32_storage.data() + offset)
                                              : static_cast<void*>(grad_bf16_storage.data() + offset); }
};

// Mostly normal values; a few zeros, negative zeros, denormals, huge values, infinities and NaNs.
float Draw(std::mt19937& rng, bool specials) {
  std::uniform_int_distribution<int> pick(0, 99);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (specials) {
    switch (pick(rng)) {
      case 0: return 0.0f;
      case 1: return -0.0f;
      case 2: return std::numeric_limits<float>::denorm_min() * 37;
      case 3: return -1e30f;
      case 4: return std::numeric_limits<float>::infinity();
      case 5: return std::numeric_limits<float>::quiet_NaN();
      default: break;
    }
  }
  return normal(rng);
}

uint16_t ToBf16Truncating(float f) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16); }

void Fill(Arrays& a, DType dtype, size_t n, size_t offset, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  a = Arrays();
  a.dtype = dtype;
  a.n = n;
  a.offset = offset;
  a.f32_storage.resize(n + offset);
  a.bf16_storage.resize(n + offset);
  a.grad_f32_storage.resize(n + offset);
  a.grad_bf16_storage.resize(n + offset);
  a.m.assign(n, 0);
  a.v.assign(n, 0);
  a.buf.assign(n, 0);
  a.master.resize(n);
  for (size_t i = 0; i < n; ++i) {
    a.master[i] = Draw(rng, specials);
    a.f32_storage[offset + i] = a.master[i];
    a.bf16_storage[offset + i] = ToBf16Truncating(a.master[i]);
  }
}

void NewGrads(Arrays& a, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  for (size_t i = 0; i < a.n; ++i) {
    float g = Draw(rng, specials);
    a.grad_f32_storage[a.offset + i] = g;
    a.grad_bf16_storage[a.offset + i] = ToBf16Truncating(g);
  }
}

bool SameBits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}

// First index where two float arrays differ (NaN matches NaN), or -1.
long FirstDiff(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!SameBits(a[i], b[i])) return static_cast<long>(i);
  return -1;
}

struct Trial {
  std::unique_ptr<HostOptimizer> opt;
  std::vector<Arrays> tensors;
};

Trial Make(Isa isa, int threads, size_t block, const HyperParams& hp, DType dtype, bool specials) {
  Trial r;
  Options o;
  o.isa = isa;
  o.threads = threads;
  o.block_elems = block;
  auto opt = HostOptimizer::Create(o);
  EXPECT_TRUE(opt.ok()) << opt.status().ToString();
  r.opt = std::move(*opt);
  auto g = r.opt->AddGroup(hp);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  uint32_t seed = 1;
  for (size_t n : kLengths) {
    for (size_t offset : {0, 1}) {
      r.tensors.emplace_back();
      Fill(r.tensors.back(), dtype, n, offset, seed++, specials);
    }
  }
  for (Arrays& a : r.tensors) {
    TensorSpec s;
    s.param = a.param();
    s.grad = a.grad();
    s.numel = a.n;
    s.dtype = dtype;
    s.exp_avg = a.m.data();
    s.exp_avg_sq = a.v.data();
    s.momentum_buffer = a.buf.data();
    s.master = a.master.data();
    EXPECT_TRUE(r.opt->AddTensor(*g, s).ok());
  }
  return r;
}

void ExpectEqual(Trial& ref, Trial& vec, const std::string& where) {
  for (size_t k = 0; k < ref.tensors.size(); ++k) {
    Arrays& a = ref.tensors[k];
    Arrays& b = vec.tensors[k];
    const std::string at = where + " tensor n=" + std::to_string(a.n) + " offset=" + std::to_string(a.offset);
    if (a.dtype == DType::kF32) {
      long i = FirstDiff(a.f32_storage.data(), b.f32_storage.data(), a.f32_storage.size());
      ASSERT_EQ(i, -1) << at << " param[" << i << "] " << a.f32_storage[i] << " vs " << b.f32_storage[i];
    } else {
      ASSERT_EQ(a.bf16_storage, b.bf16_storage) << at << " bf16 param";
      long i = FirstDiff(a.master.data(), b.master.data(), a.n);
      ASSERT_EQ(i, -1) << at << " master[" << i << "] " << a.master[i] << " vs " << b.master[i];
    }
    long i = FirstDiff(a.m.data(), b.m.data(), a.n);
    ASSERT_EQ(i, -1) << at << " exp_avg[" << i << "]";
    i = FirstDiff(a.v.data(), b.v.data(), a.n);
    ASSERT_EQ(i, -1) << at << " exp_avg_sq[" << i << "]";
    i = FirstDiff(a.buf.data(), b.buf.data(), a.n);
    ASSERT_EQ(i, -1) << at << " momentum_buffer[" << i << "]";
  }
}

struct Param {
  Isa isa;
  Config config;
  DType dtype;
  bool specials;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << IsaName(p.isa) << " " << p.config.name << " " << DTypeName(p.dtype) << (p.specials ? " specials" : "");
}

class KernelsEqualReference : public ::testing::TestWithParam<Param> {};

TEST_P(KernelsEqualReference, BitForBitOverStepsThreadsAndBlocks) {
  const Param& p = GetParam();
  if (!IsaSupported(p.isa)) GTEST_SKIP() << IsaName(p.isa) << " is not available on this CPU";
  constexpr int kSteps = 3;
  for (int threads : {1, 2, 3, 5}) {
    for (size_t block : {size_t{64}, size_t{192}, size_t{4096}}) {
      Trial ref_run = Make(Isa::kScalar, 1, 1 << 16, p.config.hp, p.dtype, p.specials);
      Trial vec_run = Make(p.isa, threads, block, p.config.hp, p.dtype, p.specials);
      for (int step = 0; step < kSteps; ++step) {
        for (Trial* r : {&ref_run, &vec_run}) {
          uint32_t seed = 1000 + 100 * static_cast<uint32_t>(step);
          for (Arrays& a : r->tensors) NewGrads(a, seed++, p.specials);
          ASSERT_TRUE(r->opt->Step().ok());
        }
        ExpectEqual(ref_run, vec_run, std::string(IsaName(p.isa)) + " threads=" + std::to_string(threads) +
                                          " block=" + std::to_string(block) + " step=" + std::to_string(step + 1));
        if (HasFatalFailure()) return;
      }
    }
  }
}

std::vector<Param> AllParams() {
  std::vector<Param> out;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    for (const Config& c : Configs()) {
      for (DType d : {DType::kF32, DType::kBF16}) {
        for (bool specials : {false, true}) out.push_back({isa, c, d, specials});
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, KernelsEqualReference, ::testing::ValuesIn(AllParams()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(IsaName(info.param.isa)) + "_" + info.param.config.name + "_" +
                                  DTypeName(info.param.dtype) + (info.param.specials ? "_specials" : "");
                         });

// A tensor larger than one default block, over the default options: the path the benchmark takes.
TEST(KernelsEqualReference, DefaultOptionsOnAMultiBlockTensor) {
  constexpr size_t kN = 3 * (1 << 16) + 77;
  for (Algorithm a : {Algorithm::kSgd, Algorithm::kAdam, Algorithm::kAdamW}) {
    HyperParams hp = DefaultHyperParams(a);
    hp.momentum = a == Algorithm::kSgd ? 0.9 : 0;
    std::vector<float> p_ref(kN), p_vec(kN), g(kN);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    for (size_t i = 0; i < kN; ++i) p_ref[i] = p_vec[i] = normal(rng);
    std::vector<std::unique_ptr<HostOptimizer>> opts;
    for (Isa isa : {Isa::kScalar, Isa::kAuto}) {
      Options o;
      o.isa = isa;
      o.threads = isa == Isa::kScalar ? 1 : 2;
      auto opt = HostOptimizer::Create(o);
      ASSERT_TRUE(opt.ok());
      auto grp = (*opt)->AddGroup(hp);
      ASSERT_TRUE(grp.ok());
      TensorSpec s;
      s.param = isa == Isa::kScalar ? p_ref.data() : p_vec.data();
      s.grad = g.data();
      s.numel = kN;
      ASSERT_TRUE((*opt)->AddTensor(*grp, s).ok());
      opts.push_back(std::move(*opt));
    }
    for (int step = 0; step < 4; ++step) {
      for (float& x : g) x = normal(rng);
      for (auto& o : opts) ASSERT_TRUE(o->Step().ok());
    }
    EXPECT_EQ(FirstDiff(p_ref.data(), p_vec.data(), kN), -1) << AlgorithmName(a) << " on " << IsaName(opts[1]->isa());
  }
}

}  // namespace
}  // namespace karma::hostopt
