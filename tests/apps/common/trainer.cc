// The training loop, the three allocation modes, sizing by dry runs, and the output contract.
#include "common/trainer.h"

#include <CLI/CLI.hpp>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "common/layers.h"
#include "include/karma/karma.h"
#include "ground/common/units.h"

namespace apps {

double g_flops_per_element = 2 * 3 * 3 * 256;

namespace {

const char* g_program = "trainer";

// Registers the shared kernels, as nvcc would for this translation unit.
const Module<kernels::BiasActFwd, kernels::BiasActBwd, kernels::Dropout, kernels::BiasResidual, kernels::Bias,
             kernels::Add, kernels::Accumulate, kernels::RowSum, kernels::MseLoss, kernels::SgdMomentum,
             kernels::Adam>
    g_module;

[[noreturn]] void Fail(bool out_of_memory, const char* what, const char* detail) {
  if (out_of_memory) {
    std::fprintf(stderr, "%s: CUDA out of memory in %s (%s)\n", g_program, what, detail);
    std::exit(2);
  }
  std::fprintf(stderr, "%s: CUDA error in %s: %s\n", g_program, what, detail);
  std::exit(1);
}

// ---- copies through the driver API ----------------------------------------------------------------------------

// APPS_DRIVER_COPIES=1 in the environment: every copy through the driver API, with entry points from
// cudaGetDriverEntryPointByVersion, as a library that reaches the driver itself copies. Null otherwise.
struct DriverCopies {
  PFN_cuMemcpyHtoDAsync_v3020 h2d = nullptr;
  PFN_cuMemcpyDtoDAsync_v3020 d2d = nullptr;
  PFN_cuMemcpyDtoHAsync_v3020 d2h = nullptr;
  PFN_cuMemcpyDtoH_v3020 d2h_sync = nullptr;
};

template <typename Fn>
void EntryPoint(const char* name, Fn* out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  Check(cudaGetDriverEntryPointByVersion(name, &fn, CUDA_VERSION, cudaEnableDefault, &found),
        "cudaGetDriverEntryPointByVersion");
  if (fn == nullptr || found != cudaDriverEntryPointSuccess) Fail(false, name, "no driver entry point");
  *out = reinterpret_cast<Fn>(fn);
}

const DriverCopies* Driver() {
  static const DriverCopies* const copies = []() -> const DriverCopies* {
    if (std::getenv("APPS_DRIVER_COPIES") == nullptr) return nullptr;
    static DriverCopies c;
    EntryPoint("cuMemcpyHtoDAsync", &c.h2d);
    EntryPoint("cuMemcpyDtoDAsync", &c.d2d);
    EntryPoint("cuMemcpyDtoHAsync", &c.d2h);
    EntryPoint("cuMemcpyDtoH", &c.d2h_sync);
    return &c;
  }();
  return copies;
}

CUdeviceptr Dev(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }

// The copies of the training loop: through the runtime, or the driver with APPS_DRIVER_COPIES.
void CopyToHostAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (const DriverCopies* d = Driver()) return Check(d->d2h(dst, Dev(src), bytes, stream), "cuMemcpyDtoHAsync");
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
}

void CopyToHost(void* dst, const void* src, size_t bytes) {
  if (const DriverCopies* d = Driver()) return Check(d->d2h_sync(dst, Dev(src), bytes), "cuMemcpyDtoH");
  Check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
}

// ---- allocators -------------------------------------------------------------------------------------------

class AsyncAllocator : public Allocator {
 public:
  explicit AsyncAllocator(cudaStream_t s) : stream_(s) {}
  void* Alloc(size_t bytes) override {
    void* p = nullptr;
    Check(cudaMallocAsync(&p, bytes, stream_), "cudaMallocAsync");
    return p;
  }
  void Free(void* p) override { Check(cudaFreeAsync(p, stream_), "cudaFreeAsync"); }

 private:
  cudaStream_t stream_;
};

class MallocAllocator : public Allocator {
 public:
  void* Alloc(size_t bytes) override {
    void* p = nullptr;
    Check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void Free(void* p) override { Check(cudaFree(p), "cudaFree"); }
};

// PyTorch's default scheme: requests up to 1 MiB come from 2 MiB segments, larger ones from 20 MiB segments
// (or a segment of their own size, rounded to 2 MiB, above 10 MiB); freed blocks stay cached, best fit with
// splitting and coalescing; when cudaMalloc fails, empty cached segments are released and it is tried again.
//
// With `drift`, each iteration begins by holding two blocks no kernel touches, of sizes that change from one
// iteration to the next without a period (1 to 4 MiB from the large pool, 512 B to 64 KiB from the small one), and
// releases the previous iteration's; and in about half the iterations (chosen the same way) a split block gives
// its end rather than its start. The tensors of an iteration land at other offsets than the last one's, as
// PyTorch's do when the state of its free lists differs between iterations.
class SegmentAllocator : public Allocator {
 public:
  explicit SegmentAllocator(bool drift = false) : drift_(drift) {}
  ~SegmentAllocator() override {
    for (auto& [base, seg] : segments_) cudaFree(reinterpret_cast<void*>(base));
  }

  void* Alloc(size_t bytes) override {
    const uint64_t size = std::max<uint64_t>(512, (bytes + 511) / 512 * 512);
    const bool small = size <= kSmallLimit;
    auto& pool = small ? small_free_ : large_free_;
    auto it = pool.lower_bound({size, 0});
    if (it == pool.end()) {
      NewSegment(small ? kSmallSegment : size < 10 * karma::kMiB ? 20 * karma::kMiB : (size + kRound - 1) / kRound * kRound,
                 small);
      it = pool.lower_bound({size, 0});
    }
    const auto [block_size, addr] = *it;
    pool.erase(it);
    Block& b = blocks_.at(addr);
    b.free = false;
    const uint64_t rest = block_size - size;
    if (rest >= (small ? 512 : karma::kMiB)) {  // split off the remainder as a free block
      if (from_end_) {  // drift: the tensor takes the end of the block, the remainder stays free at its start
        b.size = rest;
        b.free = true;
        pool.insert({rest, addr});
        blocks_[addr + rest] = Block{size, false, b.segment};
        return reinterpret_cast<void*>(addr + rest);
      }
      b.size = size;
      blocks_[addr + size] = Block{rest, true, b.segment};
      pool.insert({rest, addr + size});
    }
    return reinterpret_cast<void*>(addr);
  }

  void Free(void* p) override {
    uintptr_t addr = reinterpret_cast<uintptr_t>(p);
    auto it = blocks_.find(addr);
    if (it == blocks_.end() || it->second.free) Fail(false, "free", "not an allocated block");
    Block& b = it->second;
    b.free = true;
    auto& pool = segments_.at(b.segment).small ? small_free_ : large_free_;
    // Coalesce with the next and the previous block of the same segment.
    auto next = std::next(it);
    if (next != blocks_.end() && next->second.free && next->second.segment == b.segment) {
      pool.erase({next->second.size, next->first});
      b.size += next->second.size;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.free && prev->second.segment == b.segment) {
        pool.erase({prev->second.size, prev->first});
        prev->second.size += b.size;
        blocks_.erase(it);
        it = prev;
      }
    }
    pool.insert({it->second.size, it->first});
  }

  void BeginIteration(int iteration) override {
    if (!drift_) return;
    for (void* p : shims_) Free(p);
    shims_.clear();
    const uint64_t h = Mix(static_cast<uint64_t>(iteration) + 0x5eed);
    from_end_ = false;
    shims_.push_back(Alloc(kSmallLimit + 1 + (h % 4) * karma::kMiB));
    shims_.push_back(Alloc(512 * (1 + (h >> 8) % 128)));
    from_end_ = (h >> 16) % 2 == 1;
  }

 private:
  static constexpr uint64_t kSmallLimit = 1 << 20;
  static constexpr uint64_t kSmallSegment = 2 << 20;
  static constexpr uint64_t kRound = 2 << 20;

  struct Block {
    uint64_t size;
    bool free;
    uintptr_t segment;
  };
  struct Segment {
    uint64_t size;
    bool small;
  };

  void NewSegment(uint64_t size, bool small) {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      ReleaseEmptySegments();
      e = cudaMalloc(&p, size);
    }
    Check(e, "cudaMalloc (segment)");
    const uintptr_t base = reinterpret_cast<uintptr_t>(p);
    segments_[base] = Segment{size, small};
    blocks_[base] = Block{size, true, base};
    (small ? small_free_ : large_free_).insert({size, base});
  }

  void ReleaseEmptySegments() {
    for (auto it = segments_.begin(); it != segments_.end();) {
      const Block& b = blocks_.at(it->first);
      if (b.free && b.size == it->second.size) {
        (it->second.small ? small_free_ : large_free_).erase({b.size, it->first});
        blocks_.erase(it->first);
        Check(cudaFree(reinterpret_cast<void*>(it->first)), "cudaFree (segment)");
        it = segments_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::map<uintptr_t, Segment> segments_;
  std::map<uintptr_t, Block> blocks_;  // every block of every segment, by address
  std::set<std::pair<uint64_t, uintptr_t>> small_free_, large_free_;  // (size, address): best fit
  bool drift_ = false;
  bool from_end_ = false;     // this iteration splits blocks from their end (drift)
  std::vector<void*> shims_;  // this iteration's untouched blocks (drift)
};

// ---- output ---------------------------------------------------------------------------------------------

uint64_t Fnv1a(const void* data, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

uint64_t MeasurePeak(const AppInfo& app, Shape shape) {
  Context dry = Context::Dry();
  auto model = app.make(shape);
  model->Init(dry);
  float* loss = dry.New(1);
  model->ForwardBackward(dry, 0, 0, loss, {});
  model->Update(dry, 0);
  return dry.peak_bytes();
}

// --shards in one process: each shard's gradients are summed in shard order into a copy, handed back in g by
// Finish: the same sums, in the same order, as the MPI variant's rank-ordered allreduce.
class LocalExchange : public GradientExchange {
 public:
  explicit LocalExchange(int shards) : shards_(shards) {}
  int first_shard() const override { return 0; }
  int local_shards() const override { return shards_; }
  int total_shards() const override { return shards_; }
  void Ready(Context& c, int shard, Param& p) override {
    if (shards_ == 1) return;
    float*& acc = sums_[&p];
    if (acc == nullptr) acc = c.New(static_cast<size_t>(p.n));
    if (shard == 0) {
      c.Copy(acc, p.g, static_cast<size_t>(p.n));
    } else {
      c.Run<kernels::Accumulate>(p.n, p.n, static_cast<const float*>(p.g), acc);
    }
  }
  void Finish(Context& c) override {
    for (auto& [p, acc] : sums_) c.Copy(p->g, acc, static_cast<size_t>(p->n));
  }
  float ReduceLoss(float local) override { return local; }
  void Release(Context& c) {
    for (auto& [p, acc] : sums_) c.Free(acc);
    sums_.clear();
  }

 private:
  int shards_;
  std::map<Param*, float*> sums_;
};

// The host optimizer (libkarma_mpi.so's karma_optimizer_* functions, found at run time: the apps never link
// KARMA) over the model's parameters, with its optimizer state arrays as the host optimizer's state.
class HostOptimizer {
 public:
  ~HostOptimizer() {
    if (opt_ != nullptr) destroy_(opt_);
  }
  bool Create(Model& model, std::string* error) {
    auto sym = [](const char* name) { return dlsym(RTLD_DEFAULT, name); };
    auto create = reinterpret_cast<int (*)(const void*, void**)>(sym("karma_optimizer_create"));
    auto defaults = reinterpret_cast<void (*)(int, karma_opt_hparams*)>(sym("karma_opt_hparams_default"));
    auto add_group = reinterpret_cast<int (*)(void*, const karma_opt_hparams*, int32_t*)>(sym("karma_optimizer_add_group"));
    auto add_tensor = reinterpret_cast<int (*)(void*, int32_t, const karma_opt_tensor*, int32_t*)>(
        sym("karma_optimizer_add_tensor"));
    auto last_error = reinterpret_cast<const char* (*)()>(sym("karma_last_error"));
    destroy_ = reinterpret_cast<void (*)(void*)>(sym("karma_optimizer_destroy"));
    step_ = reinterpret_cast<int (*)(void*)>(sym("karma_optimizer_step"));
    if (!create || !defaults || !add_group || !add_tensor || !last_error || !destroy_ || !step_) {
      *error = "the karma_optimizer_* functions are not in the process (preload libkarma_mpi.so)";
      return false;
    }
    const OptimizerSpec spec = model.optimizer();
    karma_opt_hparams hp;
    defaults(spec.algorithm, &hp);
    hp.lr = spec.lr;
    hp.momentum = spec.momentum;
    int32_t group = 0;
    bool ok = create(nullptr, &opt_) == 0 && add_group(opt_, &hp, &group) == 0;
    model.ForEachParam([&](Param& p) {
      karma_opt_tensor t{};
      t.param = p.w;
      t.grad = p.g;
      t.numel = static_cast<uint64_t>(p.n);
      if (spec.algorithm == KARMA_OPT_SGD) {
        t.momentum_buffer = p.s1;
      } else {
        t.exp_avg = p.s1;
        t.exp_avg_sq = p.s2;
      }
      ok = ok && add_tensor(opt_, group, &t, nullptr) == 0;
    });
    if (!ok) *error = last_error();
    return ok;
  }
  void* handle() const { return opt_; }
  bool Step() { return step_(opt_) == 0; }

 private:
  void* opt_ = nullptr;
  void (*destroy_)(void*) = nullptr;
  int (*step_)(void*) = nullptr;
};

// --timeline: when each iteration's backward pass began and ended on this process (CLOCK_MONOTONIC seconds).
double Now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  Fail(e == cudaErrorMemoryAllocation, what, cudaGetErrorString(e));
}

void Check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  Fail(s == CUBLAS_STATUS_ALLOC_FAILED, what, cublasGetStatusString(s));
}

void Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  char text[48];
  std::snprintf(text, sizeof text, "driver error %d", static_cast<int>(r));
  Fail(r == CUDA_ERROR_OUT_OF_MEMORY, what, text);
}

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::unique_ptr<Allocator> MakeAllocator(AllocMode mode, cudaStream_t stream) {
  switch (mode) {
    case AllocMode::kAsync: return std::make_unique<AsyncAllocator>(stream);
    case AllocMode::kMalloc: return std::make_unique<MallocAllocator>();
    case AllocMode::kSegments: return std::make_unique<SegmentAllocator>();
    case AllocMode::kDrift: return std::make_unique<SegmentAllocator>(true);
  }
  return nullptr;
}

// ---- context --------------------------------------------------------------------------------------------

Context::Context(Allocator* alloc, cudaStream_t stream, cublasHandle_t blas)
    : alloc_(alloc), stream_(stream), blas_(blas) {}

Context Context::Dry() {
  Context c;
  c.dry_ = true;
  return c;
}

float* Context::New(size_t count) {
  const size_t bytes = std::max<size_t>(count, 1) * sizeof(float);
  if (dry_) {
    // Distinct fake addresses; only the byte counts matter.
    auto* p = reinterpret_cast<float*>(static_cast<uintptr_t>(dry_sizes_.size() + 1) * 4096);
    dry_sizes_.push_back({p, bytes});
    live_ += bytes;
    peak_ = std::max(peak_, live_);
    return p;
  }
  return static_cast<float*>(alloc_->Alloc(bytes));
}

void Context::Free(float* p) {
  if (p == nullptr) return;
  if (dry_) {
    auto it = std::find_if(dry_sizes_.begin(), dry_sizes_.end(), [&](const auto& e) { return e.first == p; });
    if (it != dry_sizes_.end() && it->second != 0) {
      live_ -= it->second;
      it->second = 0;
    }
    return;
  }
  alloc_->Free(p);
}

void Context::Upload(float* dst, const float* src, size_t count) {
  if (dry_) return;
  if (const DriverCopies* d = Driver()) {
    return Check(d->h2d(Dev(dst), src, count * sizeof(float), stream_), "cuMemcpyHtoDAsync");
  }
  Check(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
}

void Context::Copy(float* dst, const float* src, size_t count) {
  if (dry_) return;
  if (const DriverCopies* d = Driver()) {
    return Check(d->d2d(Dev(dst), Dev(src), count * sizeof(float), stream_), "cuMemcpyDtoDAsync");
  }
  Check(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
}

Param NewParam(Context& c, int64_t n, float scale, uint64_t seed, uint64_t id, int states) {
  Param p;
  p.n = n;
  p.w = c.New(static_cast<size_t>(n));
  p.g = c.New(static_cast<size_t>(n));
  if (states > 0) p.s1 = c.New(static_cast<size_t>(n));
  if (states > 1) p.s2 = c.New(static_cast<size_t>(n));
  if (c.dry()) return p;
  std::vector<float> host(static_cast<size_t>(n), 0.0f);
  c.Upload(p.g, host.data(), host.size());
  if (p.s1 != nullptr) c.Upload(p.s1, host.data(), host.size());
  if (p.s2 != nullptr) c.Upload(p.s2, host.data(), host.size());
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = scale * Uniform(seed, id, static_cast<uint64_t>(i));
  c.Upload(p.w, host.data(), host.size());
  return p;
}

void UploadBatch(Context& c, const Shape& s, int iter, int shard, float* x, float* target) {
  if (c.dry()) return;
  const int w = s.width;
  const size_t n = static_cast<size_t>(w) * static_cast<size_t>(s.batch);
  const size_t first = n * static_cast<size_t>(shard);  // this shard's samples within the global batch
  std::vector<float> hx(n), ht(n);
  const uint64_t stream = (1ull << 32) + static_cast<uint64_t>(iter);  // apart from the weights' streams
  for (size_t i = 0; i < n; ++i) hx[i] = Uniform(s.seed, stream, first + i);
  for (size_t j = 0; j < static_cast<size_t>(s.batch); ++j) {
    for (int f = 0; f < w; ++f) ht[f + j * w] = 0.5f * hx[(f + 1) % w + j * w];
  }
  c.Upload(x, hx.data(), n);
  c.Upload(target, ht.data(), n);
}

void FreeParam(Context& c, Param& p) {
  c.Free(p.w);
  c.Free(p.g);
  c.Free(p.s1);
  c.Free(p.s2);
  p = Param{};
}

void Context::Gemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                   int ldc, bool accumulate) {
  if (dry_) return;
  const float one = 1, beta = accumulate ? 1.0f : 0.0f;
  Check(cublasSgemm_v2(blas_, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one, a, lda, b,
                       ldb, &beta, c, ldc),
        "cublasSgemm");
}

// ---- the program ----------------------------------------------------------------------------------------

namespace {

// The allocator PyTorch would use: its cudaMallocAsync backend where PYTORCH_ALLOC_CONF says so (PyTorch 2.9+
// reads it first; earlier versions read PYTORCH_CUDA_ALLOC_CONF), else its caching allocator's segments.
std::string DefaultAlloc() {
  for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    if (const char* v = std::getenv(name)) {
      return std::string(v).find("backend:cudaMallocAsync") != std::string::npos ? "async" : "segments";
    }
  }
  return "segments";
}

}  // namespace

int RunTrainer(int argc, char** argv, const AppInfo& app) {
  g_program = app.name;
  CLI::App cli{std::string(app.description) +
               "\nOutput: one line per iteration 'iter <i> loss <loss> ms <virtual ms>', then 'checksum <hex>'."
               "\nExit codes: 0 done, 1 CUDA error, 2 CUDA out of memory, 64 bad command line."};
  int iters = 5;
  std::string footprint_text;
  double size_factor = 0.5;
  std::string alloc_text = DefaultAlloc();
  Shape shape;
  shape.depth = app.default_depth;
  shape.width = app.default_width;
  cli.add_option("--iters", iters, "training iterations")->check(CLI::PositiveNumber);
  auto* footprint_opt = cli.add_option("--footprint", footprint_text,
                                       "size the model so that its ideal in-core peak is about BYTES (512MiB, 2GiB)");
  cli.add_option("--size-factor", size_factor, "size the model to K times the device's total memory (default 0.5)")
      ->check(CLI::PositiveNumber)
      ->excludes(footprint_opt);
  cli.add_option("--alloc", alloc_text,
                 "async: cudaMallocAsync per tensor; segments: caching allocator over cudaMalloc segments "
                 "(PyTorch's default); drift: the same, each iteration's tensors at other offsets than the last "
                 "one's (as PyTorch's may be); malloc: cudaMalloc per tensor. Default: as PyTorch chooses, async "
                 "where PYTORCH_ALLOC_CONF (or PYTORCH_CUDA_ALLOC_CONF) holds backend:cudaMallocAsync (libkarma.so "
                 "sets it), else segments")
      ->check(CLI::IsMember({"async", "segments", "drift", "malloc"}))
      ->capture_default_str();
  cli.add_option("--width", shape.width, "features per layer")->check(CLI::Range(1, 4096))->capture_default_str();
  cli.add_option("--depth", shape.depth, "layers (blocks for skipnet)")->check(CLI::Range(1, 1024))->capture_default_str();
  cli.add_option("--flops-per-element", g_flops_per_element,
                 "virtual flops a layer kernel declares per output element (models a convolution)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bool mark = false;
  cli.add_flag("--mark", mark,
               "call karma_iteration_begin() before each iteration when libkarma.so is loaded (explicit iteration "
               "marks instead of detection)");
  cli.add_option("--seed", shape.seed, "seed of the synthetic data and weights")->capture_default_str();
  int shards = 1;
  bool host_optimizer = false, mpi = false;
  std::string timeline;
  ExchangeOptions exchange_options;
  cli.add_option("--shards", shards,
                 "data parallelism in one process: the global batch is N shards of the sized batch, their gradients "
                 "summed in shard order (the reference of an N-rank --mpi run)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cli.add_flag("--host-optimizer", host_optimizer,
               "update the parameters on the host with KARMA's optimizer (needs libkarma_mpi.so preloaded); with "
               "--mpi, each tensor as soon as its gradient is reduced");
  cli.add_option("--timeline", timeline,
                 "write when each backward pass began and ended (CLOCK_MONOTONIC seconds) to FILE as JSON; %r "
                 "becomes the rank");
  if (app.mpi) {
    auto* mpi_flag = cli.add_flag("--mpi", mpi,
                                  "data parallelism over MPI_COMM_WORLD: rank r computes shard r of the global batch, "
                                  "gradients are averaged with MPI_Iallreduce per tensor as soon as they are final");
    cli.add_option("--fail", exchange_options.fail, "(tests) a rank fails in the middle of a backward pass")
        ->check(CLI::IsMember({"abort", "exit", "hang"}))
        ->needs(mpi_flag);
    cli.add_option("--fail-iter", exchange_options.fail_iter, "(tests) the iteration it fails in")->capture_default_str();
    cli.add_option("--fail-rank", exchange_options.fail_rank, "(tests) the rank that fails (-1: the last)")
        ->capture_default_str();
    mpi_flag->excludes(cli.get_option("--shards"));
  }
  if (app.extra_flags) app.extra_flags(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = cli.exit(e);
    return code == 0 ? 0 : 64;
  }
  std::unique_ptr<GradientExchange> exchange;
  if (mpi) {
    exchange_options.argc = argc;
    exchange_options.argv = argv;
    exchange = app.mpi(exchange_options);
  } else {
    exchange = std::make_unique<LocalExchange>(shards);
  }
  shape.shards = exchange->total_shards();
  if (const size_t r = timeline.find("%r"); r != std::string::npos) {
    timeline.replace(r, 2, std::to_string(exchange->rank()));
  }
  const AllocMode mode = alloc_text == "async"    ? AllocMode::kAsync
                         : alloc_text == "malloc" ? AllocMode::kMalloc
                         : alloc_text == "drift"  ? AllocMode::kDrift
                                                  : AllocMode::kSegments;

  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  uint64_t target = 0;
  if (!footprint_text.empty()) {
    auto parsed = karma::ParseBytes(footprint_text);
    if (!parsed.ok() || *parsed == 0) {
      std::fprintf(stderr, "%s: --footprint: '%s' is not a byte count (%s)\n", app.name, footprint_text.c_str(),
                   karma::kBytesForms);
      return 64;
    }
    target = *parsed;
  } else {
    target = static_cast<uint64_t>(size_factor * static_cast<double>(prop.totalGlobalMem));
  }

  // The ideal peak is affine in the batch size: measure it at two sizes without a device, then solve.
  shape.batch = 1;
  const uint64_t p1 = MeasurePeak(app, shape);
  shape.batch = 2;
  const uint64_t p2 = MeasurePeak(app, shape);
  const uint64_t per_sample = p2 - p1, fixed = p1 - per_sample;
  shape.batch = target > fixed ? std::max<int64_t>(1, static_cast<int64_t>((target - fixed) / per_sample)) : 1;
  std::fprintf(stderr, "%s: width %d, depth %d, batch %" PRId64 ": ideal in-core peak %s (target %s) on %s\n",
               app.name, shape.width, shape.depth, shape.batch,
               karma::FormatBytes(fixed + per_sample * static_cast<uint64_t>(shape.batch)).c_str(),
               karma::FormatBytes(target).c_str(), prop.name);

  cudaStream_t stream = nullptr;  // the legacy default stream, as PyTorch uses by default
  cublasHandle_t blas = nullptr;
  Check(cublasCreate_v2(&blas), "cublasCreate");
  Check(cublasSetStream_v2(blas, stream), "cublasSetStream");
  auto allocator = MakeAllocator(mode, stream);
  Context ctx(allocator.get(), stream, blas);
  auto model = app.make(shape);
  model->Init(ctx);
  const int local = exchange->local_shards();
  float* loss_dev = ctx.New(static_cast<size_t>(local));  // one loss per shard this process computes
  float* loss_host = nullptr;
  Check(cudaMallocHost(reinterpret_cast<void**>(&loss_host), sizeof(float) * static_cast<size_t>(local)),
        "cudaMallocHost");
  HostOptimizer host_opt;
  bool host_updates_in_exchange = false;
  if (host_optimizer) {
    std::string error;
    if (!host_opt.Create(*model, &error)) {
      std::fprintf(stderr, "%s: --host-optimizer: %s\n", app.name, error.c_str());
      return 1;
    }
    host_updates_in_exchange = exchange->AttachHostOptimizer(host_opt.handle());
  }
  std::vector<std::pair<double, double>> backward_times;  // per iteration: begin, end
  cudaEvent_t start = nullptr, stop = nullptr;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");
  using MarkFn = void (*)();
  const auto mark_fn = mark ? reinterpret_cast<MarkFn>(dlsym(RTLD_DEFAULT, "karma_iteration_begin")) : nullptr;
  for (int i = 0; i < iters; ++i) {
    if (mark_fn != nullptr) mark_fn();
    allocator->BeginIteration(i);
    Check(cudaEventRecord(start, stream), "cudaEventRecord");
    double backward_begin = 0;
    for (int k = 0; k < local; ++k) {
      const int shard = exchange->first_shard() + k;
      BackwardHooks hooks;
      hooks.begin = [&] {
        if (k == 0) backward_begin = Now();
      };
      hooks.ready = [&](Param& p) { exchange->Ready(ctx, shard, p); };
      model->ForwardBackward(ctx, i, shard, loss_dev + k, hooks);
    }
    backward_times.push_back({backward_begin, Now()});
    exchange->Finish(ctx);
    if (!host_optimizer) {
      model->Update(ctx, i);
    } else if (!host_updates_in_exchange) {
      Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // the gradients, read on the host
      if (!host_opt.Step()) Fail(false, "the host optimizer step", "karma_optimizer_step failed");
    }
    Check(cudaEventRecord(stop, stream), "cudaEventRecord");
    CopyToHostAsync(loss_host, loss_dev, sizeof(float) * static_cast<size_t>(local), stream);
    Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    float loss = loss_host[0];
    for (int k = 1; k < local; ++k) loss += loss_host[k];
    loss = exchange->ReduceLoss(loss);
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    std::printf("iter %d loss %.9g ms %.4f\n", i, static_cast<double>(loss), static_cast<double>(ms));
    std::fflush(stdout);
  }
  uint64_t h = 0xcbf29ce484222325ull;
  model->ForEachParam([&](Param& p) {
    std::vector<float> host(static_cast<size_t>(p.n));
    CopyToHost(host.data(), p.w, host.size() * sizeof(float));
    h = Fnv1a(host.data(), host.size() * sizeof(float), h);
  });
  std::printf("checksum %016" PRIx64 "\n", h);
  std::fflush(stdout);
  if (!timeline.empty()) {
    FILE* f = std::fopen(timeline.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "%s: cannot write %s\n", app.name, timeline.c_str());
      return 1;
    }
    std::fprintf(f, "{\"clock\": \"CLOCK_MONOTONIC seconds\", \"iterations\": [");
    for (size_t i = 0; i < backward_times.size(); ++i) {
      std::fprintf(f, "%s\n {\"iter\": %zu, \"backward_begin\": %.9f, \"backward_end\": %.9f}", i ? "," : "", i,
                   backward_times[i].first, backward_times[i].second);
    }
    std::fprintf(f, "\n]}\n");
    std::fclose(f);
  }
  if (auto* local_exchange = dynamic_cast<LocalExchange*>(exchange.get())) local_exchange->Release(ctx);
  exchange.reset();  // the MPI exchange finalizes MPI
  model->Release(ctx);
  ctx.Free(loss_dev);
  allocator.reset();
  Check(cudaFreeHost(loss_host), "cudaFreeHost");
  Check(cudaEventDestroy(start), "cudaEventDestroy");
  Check(cudaEventDestroy(stop), "cudaEventDestroy");
  Check(cublasDestroy_v2(blas), "cublasDestroy");
  return 0;
}

}  // namespace apps
