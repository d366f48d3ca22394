// bench_host_optimizer: throughput of the host optimizer (Adam, AdamW, SGD; fp32 and bf16) against the
// STREAM triad bandwidth measured in the same run, for 1 and 2 threads and 10M to 1B parameters.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench/host_optimizer/triad.h"
#include "mpi_shim/host_optimizer/bf16.h"
#include "mpi_shim/host_optimizer/host_optimizer.h"
#include "ground/common/units.h"

namespace karma::bench {
namespace {

using hostopt::Algorithm;
using hostopt::DType;
using hostopt::HostBuffer;
using hostopt::HostOptimizer;
using hostopt::ThreadPool;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Variant {
  const char* name;
  Algorithm algorithm;
  DType dtype;
  // The bytes one update must move per parameter, each array read or written once: the figure GB/s is
  // computed from. fp32 Adam: param r+w 8, grad r 4, exp_avg r+w 8, exp_avg_sq r+w 8 = 28. SGD with momentum:
  // 8 + 4 + 8 = 20. bf16 Adam: bf16 param w 2, bf16 grad r 2, fp32 master, exp_avg, exp_avg_sq r+w 24 = 28.
  int bytes_per_param;
};

constexpr Variant kVariants[] = {
    {"adam_fp32", Algorithm::kAdam, DType::kF32, 28},
    {"adamw_fp32", Algorithm::kAdamW, DType::kF32, 28},
    {"sgd_momentum_fp32", Algorithm::kSgd, DType::kF32, 20},
    {"adam_bf16", Algorithm::kAdam, DType::kBF16, 28},
};

struct Measurement {
  double best_s = 0;
  double median_s = 0;
};

template <typename Fn>
Measurement Time(int reps, Fn&& fn) {
  fn();  // warm-up: page faults, first-step branches, caches
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    fn();
    t.push_back(Seconds(Clock::now() - start));
  }
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2]};
}

// Deterministic values in [-1, 1) without a serial RNG, so filling 16 GB takes the pool a second or two.
float Value(size_t i, uint32_t salt) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ salt;
  x ^= x >> 15;
  x *= 2246822519u;
  x ^= x >> 13;
  return static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

// Four fp32 arrays of n elements (16 n bytes), reused by every variant of one size.
struct Arrays {
  HostBuffer a, b, c, d;
};

// Lays the variant's tensors over the arrays: fp32 param/grad/m/v in a/b/c/d; bf16 param and grad share a,
// with the fp32 master, m and v in b, c, d.
hostopt::TensorSpec Layout(const Variant& v, Arrays& arr, size_t n, ThreadPool& pool) {
  hostopt::TensorSpec s;
  s.numel = n;
  s.dtype = v.dtype;
  float* a = arr.a.as<float>();
  float* b = arr.b.as<float>();
  float* c = arr.c.as<float>();
  float* d = arr.d.as<float>();
  constexpr size_t kChunk = size_t{1} << 20;
  const size_t chunks = (n + kChunk - 1) / kChunk;
  if (v.dtype == DType::kF32) {
    pool.ParallelFor(chunks, [&](size_t k, int) {
      for (size_t i = k * kChunk; i < std::min(n, (k + 1) * kChunk); ++i) {
        a[i] = Value(i, 1);
        b[i] = 0.01f * Value(i, 2);
        c[i] = 0;
        d[i] = 0;
      }
    });
    s.param = a;
    s.grad = b;
    if (v.algorithm == Algorithm::kSgd) {
      s.momentum_buffer = c;
    } else {
      s.exp_avg = c;
      s.exp_avg_sq = d;
    }
  } else {
    uint16_t* param = reinterpret_cast<uint16_t*>(a);
    uint16_t* grad = param + n;
    pool.ParallelFor(chunks, [&](size_t k, int) {
      for (size_t i = k * kChunk; i < std::min(n, (k + 1) * kChunk); ++i) {
        b[i] = Value(i, 1);
        param[i] = hostopt::FloatToBf16(b[i]);
        grad[i] = hostopt::FloatToBf16(0.01f * Value(i, 2));
        c[i] = 0;
        d[i] = 0;
      }
    });
    s.param = param;
    s.grad = grad;
    s.master = b;
    s.exp_avg = c;
    s.exp_avg_sq = d;
  }
  return s;
}

struct Options {
  bool quick = false;
  std::vector<std::string> sizes;
  std::vector<int> threads = {1, 2};
  int reps = 0;
  size_t triad_elems = 0;
};

Result<size_t> ParseCount(const std::string& text) {
  static const std::map<char, size_t> kSuffix = {{'K', 1000}, {'M', 1000000}, {'G', 1000000000}, {'B', 1000000000}};
  size_t mult = 1;
  std::string digits = text;
  if (!digits.empty() && kSuffix.count(static_cast<char>(std::toupper(digits.back())))) {
    mult = kSuffix.at(static_cast<char>(std::toupper(digits.back())));
    digits.pop_back();
  }
  try {
    size_t pos = 0;
    const double v = std::stod(digits, &pos);
    if (pos != digits.size() || v <= 0) throw std::invalid_argument(text);
    return static_cast<size_t>(v * static_cast<double>(mult));
  } catch (const std::exception&) {
    return InvalidArgument("bad parameter count '" + text + "' (e.g. 10M, 100M, 1B, 250000)");
  }
}

std::string Count(size_t n) {
  if (n % 1000000000 == 0) return fmt::format("{}B", n / 1000000000);
  if (n % 1000000 == 0) return fmt::format("{}M", n / 1000000);
  return fmt::format("{}", n);
}

// The triad's arrays, kept for the whole run: every optimizer measurement is interleaved with triad runs on
// the same threads, so both see the same machine (other processes on a shared machine come and go).
struct TriadArrays {
  HostBuffer a, b, c;
  size_t n = 0;
  double Run(ThreadPool& pool, bool streaming) {
    const auto start = Clock::now();
    Triad(pool, a.as<double>(), b.as<double>(), c.as<double>(), n, 3.0, streaming);
    return Seconds(Clock::now() - start);
  }
  double GBs(double seconds) const { return 24.0 * static_cast<double>(n) / seconds / 1e9; }
};

struct Paired {
  Measurement step;
  double triad_best_s = 0;
};

// Alternates one optimizer step and one streaming triad, after a warm-up of each.
template <typename Fn>
Paired TimeInterleaved(int reps, ThreadPool& pool, TriadArrays& triad, Fn&& step) {
  step();
  triad.Run(pool, true);
  std::vector<double> t;
  double triad_best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    step();
    t.push_back(Seconds(Clock::now() - start));
    triad_best = std::min(triad_best, triad.Run(pool, true));
  }
  std::sort(t.begin(), t.end());
  return {{t.front(), t[t.size() / 2]}, triad_best};
}

int Main(const Options& opt) {
  const hostopt::Isa isa = hostopt::BestIsa();
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 <= 0) l3 = 32L << 20;
  std::vector<size_t> sizes;
  for (const std::string& s : opt.sizes) {
    auto n = ParseCount(s);
    if (!n.ok()) {
      fmt::print(stderr, "bench_host_optimizer: {}\n", n.status().message());
      return 2;
    }
    sizes.push_back(*n);
  }
  const int max_threads = *std::max_element(opt.threads.begin(), opt.threads.end());
  const int reps = opt.reps > 0 ? opt.reps : (opt.quick ? 3 : 5);
  fmt::print("host optimizer benchmark: kernels {}, L3 {}, memory available {}\n", hostopt::IsaName(isa),
             FormatBytes(static_cast<uint64_t>(l3)), FormatBytes(hostopt::AvailableMemoryBytes()));
  fmt::print("GB/s = 1e9 bytes/s counting each array read or written once per update (fp32 Adam/AdamW 28 B per\n"
             "parameter, SGD with momentum 20, bf16 Adam 28); best of {} timed steps after a warm-up step.\n\n",
             reps);

  // ---- STREAM triad. STREAM's rule: each array at least 4 times the last-level cache.
  TriadArrays triad;
  triad.n = opt.triad_elems ? opt.triad_elems : std::max<size_t>(4 * static_cast<size_t>(l3), 64 << 20) / 8;
  {
    const size_t avail = hostopt::AvailableMemoryBytes();
    const size_t margin = size_t{1} << 30;
    if (avail && 3 * triad.n * sizeof(double) + margin > avail) triad.n = (avail - margin) / 6 / sizeof(double);
    auto pool = ThreadPool::Create(max_threads);
    if (!pool.ok()) {
      fmt::print(stderr, "bench_host_optimizer: {}\n", pool.status().message());
      return 1;
    }
    for (HostBuffer* buf : {&triad.a, &triad.b, &triad.c}) {
      auto r = HostBuffer::Allocate(triad.n * sizeof(double), pool->get());
      if (!r.ok()) {
        fmt::print(stderr, "bench_host_optimizer: {}\n", r.status().message());
        return 1;
      }
      *buf = std::move(*r);
    }
    FillParallel(**pool, triad.b.as<double>(), triad.n, 1.0);
    FillParallel(**pool, triad.c.as<double>(), triad.n, 2.0);
  }
  fmt::print("STREAM triad a = b + s*c, 3 arrays of {} doubles ({} each), 24 bytes per element\n", triad.n,
             FormatBytes(triad.n * sizeof(double)));
  fmt::print("{:>8} {:>12} {:>10} {:>10}\n", "threads", "stores", "best ms", "GB/s");
  for (int t : opt.threads) {
    auto pool = ThreadPool::Create(t);
    if (!pool.ok()) return 1;
    for (bool streaming : {false, true}) {
      Measurement m = Time(std::max(reps, 5), [&] { triad.Run(**pool, streaming); });
      fmt::print("{:>8} {:>12} {:>10.2f} {:>10.2f}\n", t, streaming ? TriadStreamingName() : "ordinary",
                 m.best_s * 1e3, triad.GBs(m.best_s));
    }
  }
  fmt::print("(ordinary stores also read a[] into the cache first: 32 bytes move per 24 counted; streaming\n"
             "stores move the 24 and prefetch like the optimizer kernels)\n\n");

  // ---- Optimizer updates, each step followed by a streaming triad on the same threads.
  fmt::print("{:>18} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}\n", "variant", "params", "threads",
             "best ms", "median ms", "Gparam/s", "GB/s", "triad GB/s", "ratio");
  struct Chosen {
    size_t n = 0;
    int threads = 0;
    double gbs = 0, triad_gbs = 0;
  } chosen;
  for (size_t n : sizes) {
    const size_t need = 16 * n;
    const size_t avail = hostopt::AvailableMemoryBytes();
    const size_t margin = size_t{1} << 30;
    if (avail && need + margin > avail) {
      fmt::print("{:>18} {:>6} skipped: needs {} (+1 GiB margin), {} available\n", "all", Count(n),
                 FormatBytes(need), FormatBytes(avail));
      continue;
    }
    auto alloc_pool = ThreadPool::Create(max_threads);
    if (!alloc_pool.ok()) return 1;
    Arrays arr;
    for (HostBuffer* buf : {&arr.a, &arr.b, &arr.c, &arr.d}) {
      auto r = HostBuffer::Allocate(n * sizeof(float), alloc_pool->get());
      if (!r.ok()) {
        fmt::print(stderr, "bench_host_optimizer: {}\n", r.status().message());
        return 1;
      }
      *buf = std::move(*r);
    }
    for (const Variant& v : kVariants) {
      for (int t : opt.threads) {
        hostopt::Options o;
        o.threads = t;
        auto created = HostOptimizer::Create(o);
        if (!created.ok()) {
          fmt::print(stderr, "bench_host_optimizer: {}\n", created.status().message());
          return 1;
        }
        HostOptimizer& ho = **created;
        hostopt::HyperParams hp = hostopt::DefaultHyperParams(v.algorithm);
        if (v.algorithm == Algorithm::kSgd) hp.momentum = 0.9;
        const int group = *ho.AddGroup(hp);
        const hostopt::TensorSpec spec = Layout(v, arr, n, ho.pool());
        if (auto added = ho.AddTensor(group, spec); !added.ok()) {
          fmt::print(stderr, "bench_host_optimizer: {}\n", added.status().message());
          return 1;
        }
        Status step_status;
        const Paired m = TimeInterleaved(reps, ho.pool(), triad, [&] {
          Status st = ho.Step();
          if (!st.ok()) step_status = st;
        });
        if (!step_status.ok()) {
          fmt::print(stderr, "bench_host_optimizer: {}\n", step_status.message());
          return 1;
        }
        const double gbs = static_cast<double>(v.bytes_per_param) * static_cast<double>(n) / m.step.best_s / 1e9;
        const double triad_gbs = triad.GBs(m.triad_best_s);
        fmt::print("{:>18} {:>6} {:>8} {:>10.2f} {:>10.2f} {:>10.3f} {:>10.2f} {:>10.2f} {:>7.3f}\n", v.name,
                   Count(n), t, m.step.best_s * 1e3, m.step.median_s * 1e3,
                   static_cast<double>(n) / m.step.best_s / 1e9, gbs, triad_gbs, gbs / triad_gbs);
        std::fflush(stdout);
        // The last line: fp32 Adam at the largest size that ran, with the most threads.
        const bool adam32 = v.algorithm == Algorithm::kAdam && v.dtype == DType::kF32;
        if (adam32 && (n > chosen.n || (n == chosen.n && t >= chosen.threads))) chosen = {n, t, gbs, triad_gbs};
      }
    }
  }
  if (chosen.n == 0) {
    fmt::print(stderr, "bench_host_optimizer: no size fitted in memory\n");
    return 1;
  }
  fmt::print("\nlast line: fp32 Adam at {} parameters with {} thread(s), and the streaming triad on the same\n"
             "threads interleaved with its steps\n",
             Count(chosen.n), chosen.threads);
  fmt::print("adam_fp32 {:.2f} stream_triad {:.2f} ratio {:.3f}\n", chosen.gbs, chosen.triad_gbs,
             chosen.gbs / chosen.triad_gbs);
  return 0;
}

}  // namespace
}  // namespace karma::bench

int main(int argc, char** argv) {
  karma::bench::Options opt;
  CLI::App app{"bench_host_optimizer: host optimizer throughput (Adam, AdamW, SGD; fp32, bf16) against the\n"
               "STREAM triad bandwidth of the same run. The last line reads\n"
               "  adam_fp32 <GB/s at 28 bytes per parameter> stream_triad <GB/s> ratio <adam/stream>"};
  std::vector<std::string> sizes = {"10M", "100M", "1B"};
  app.add_flag("--quick", opt.quick, "small sizes only (1M, 2M parameters; 4M-element triad): a smoke test");
  app.add_option("--sizes", sizes, "parameter counts, e.g. 10M 100M 1B (sizes that do not fit are skipped)");
  app.add_option("--threads", opt.threads, "thread counts")->check(CLI::PositiveNumber);
  app.add_option("--reps", opt.reps, "timed steps per measurement (default 5, --quick 3)")->check(CLI::PositiveNumber);
  app.add_option("--triad-elems", opt.triad_elems, "elements per triad array (default: 4x the L3 cache)");
  CLI11_PARSE(app, argc, argv);
  if (opt.quick) {
    if (app.count("--sizes") == 0) sizes = {"1M", "2M"};
    if (opt.triad_elems == 0) opt.triad_elems = size_t{4} << 20;
  }
  opt.sizes = sizes;
  return karma::bench::Main(opt);
}
