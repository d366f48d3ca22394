// The frame both trainer apps share: flags, allocation modes, sizing to a footprint, the training loop, output.
#pragma once

#include <cublas_api.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/sim_kernel.h"

namespace CLI {
class App;
}

namespace apps {

// Exits with a message: code 2 and "out of memory" for an allocation failure, 1 for any other error.
void Check(cudaError_t e, const char* what);
void Check(cublasStatus_t s, const char* what);
void Check(CUresult r, const char* what);  // the driver's (APPS_DRIVER_COPIES)

enum class AllocMode { kAsync, kSegments, kMalloc, kDrift };

// Device memory for tensors. Every allocation failure exits through Check.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* Alloc(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  // Called before each training iteration.
  virtual void BeginIteration(int /*iteration*/) {}
};
// kAsync: cudaMallocAsync / cudaFreeAsync per tensor; kMalloc: cudaMalloc / cudaFree per tensor; kSegments: a
// caching allocator that sub-allocates large cudaMalloc segments, as PyTorch's default allocator does; kDrift: the
// same, with each iteration's tensors placed at other offsets than the last one's (see SegmentAllocator).
std::unique_ptr<Allocator> MakeAllocator(AllocMode mode, cudaStream_t stream);

// What one iteration runs with. In a dry run nothing reaches CUDA: allocations are only counted, so the ideal
// in-core peak of a model can be measured without a device.
class Context {
 public:
  Context(Allocator* alloc, cudaStream_t stream, cublasHandle_t blas);
  static Context Dry();

  bool dry() const { return dry_; }
  cudaStream_t stream() const { return stream_; }
  uint64_t peak_bytes() const { return peak_; }

  float* New(size_t count);
  void Free(float* p);
  // Copies of `count` floats, in stream order (nothing in a dry run).
  void Upload(float* dst, const float* src, size_t count);
  void Copy(float* dst, const float* src, size_t count);

  // One thread per element of an `elements`-long problem, 256 per block.
  template <typename K, typename... A>
  void Run(int64_t elements, A&&... args) {
    if (dry_) return;
    const int64_t blocks = elements <= 0 ? 1 : (elements + 255) / 256;
    Launch<K>(dim3(static_cast<unsigned>(std::min<int64_t>(blocks, 2147483647))), dim3(256), stream_,
              std::forward<A>(args)...);
    Check(cudaGetLastError(), K::kName);
  }
  // Column-major C = op(A) * op(B) (+ C when accumulate), as cublasSgemm.
  void Gemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
            int ldc, bool accumulate = false);

 private:
  Context() = default;
  Allocator* alloc_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  bool dry_ = false;
  uint64_t live_ = 0, peak_ = 0;
  std::vector<std::pair<float*, size_t>> dry_sizes_;
};

// A parameter tensor with its gradient and up to two optimizer-state tensors (zeroed).
struct Param {
  float* w = nullptr;
  float* g = nullptr;
  float* s1 = nullptr;
  float* s2 = nullptr;
  int64_t n = 0;
};
// Values uniform in [-scale, scale) from (seed, id); 0 when scale is 0.
Param NewParam(Context& c, int64_t n, float scale, uint64_t seed, uint64_t id, int states);
void FreeParam(Context& c, Param& p);

struct Shape {
  int64_t batch = 1;  // samples of one shard
  int width = 64;
  int depth = 8;
  uint64_t seed = 1;  // of the weights, the data and the dropout masks
  int shards = 1;     // the global batch of an iteration is shards x batch samples (data parallelism)
};

// The optimizer a model runs on the device, as torch.optim would name it (for --host-optimizer).
struct OptimizerSpec {
  int algorithm = 0;  // a karma_opt_algorithm
  double lr = 0;
  double momentum = 0;
};

// Called by a model during its backward pass.
struct BackwardHooks {
  std::function<void()> begin;         // the backward pass starts
  std::function<void(Param&)> ready;   // this parameter's gradient is final (where a framework starts its allreduce)
};

// A model trains one iteration at a time; its tensors come from the Context.
class Model {
 public:
  virtual ~Model() = default;
  // Parameters, gradients and optimizer state: allocated once, initialized deterministically.
  virtual void Init(Context& c) = 0;
  // Shard `shard` of iteration `iter`'s global batch: the input, forward, this shard's part of the loss (of the
  // global batch) into `loss` (one float on the device), backward into each Param's g, in backward order.
  virtual void ForwardBackward(Context& c, int iter, int shard, float* loss, const BackwardHooks& hooks) = 0;
  // The optimizer step on the gradients in each Param's g.
  virtual void Update(Context& c, int iter) = 0;
  // Every parameter, in a fixed order (the checksum's).
  virtual void ForEachParam(const std::function<void(Param&)>& f) = 0;
  virtual OptimizerSpec optimizer() const = 0;
  virtual void Release(Context& c) = 0;
};

// The synthetic task of both apps, for shard `shard` of iteration `iter`: inputs in [-1, 1), targets a fixed
// linear function of them (half the next feature). x and target hold width x batch floats: samples
// shard x batch onwards of the global batch.
void UploadBatch(Context& c, const Shape& s, int iter, int shard, float* x, float* target);

// How the gradients of the shards become those of the global batch: by accumulation in one process (--shards)
// or across MPI ranks (the *_mpi variants' --mpi).
class GradientExchange {
 public:
  virtual ~GradientExchange() = default;
  // The shards this process computes, each iteration, in order.
  virtual int first_shard() const = 0;
  virtual int local_shards() const = 0;
  virtual int total_shards() const = 0;
  virtual int rank() const { return 0; }
  // A parameter's gradient of one shard is final (in the Param's g).
  virtual void Ready(Context& c, int shard, Param& p) = 0;
  // Every Param's g holds the global batch's gradient once this returns.
  virtual void Finish(Context& c) = 0;
  // The global batch's loss from this process's (the sum in shard order).
  virtual float ReduceLoss(float local) = 0;
  // Registers host updates (--host-optimizer) with the exchange: true when it applies them itself as gradients
  // are reduced, so that the trainer skips its own step.
  virtual bool AttachHostOptimizer(void* optimizer) { return false; }
};

struct ExchangeOptions {
  int argc = 0;
  char** argv = nullptr;
  std::string fail;  // abort|exit|hang: a rank fails in the middle of a backward pass (tests)
  int fail_iter = 1;
  int fail_rank = -1;  // -1: the last rank
};

struct AppInfo {
  const char* name;
  const char* description;
  int default_depth;
  std::function<std::unique_ptr<Model>(const Shape&)> make;
  // Set in the *_mpi variants: the exchange over MPI_COMM_WORLD (calls MPI_Init).
  std::function<std::unique_ptr<GradientExchange>(const ExchangeOptions&)> mpi;
  int default_width = 64;
  // Flags of this app alone, added to the shared ones (none when empty).
  std::function<void(CLI::App&)> extra_flags = {};
};

// The whole program: parses the flags, sizes the model, trains, prints the output contract.
int RunTrainer(int argc, char** argv, const AppInfo& app);

// Deterministic pseudo-random values: a counter-based hash of (seed, stream, index).
uint64_t Mix(uint64_t x);
inline float Uniform(uint64_t seed, uint64_t stream, uint64_t index) {  // in [-1, 1)
  const uint64_t h = Mix(Mix(seed * 0x9E3779B97F4A7C15ull + stream) + index);
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

// The virtual cost the layer kernels declare per element they produce, modelling a convolution's arithmetic
// intensity (2 * 3 * 3 * 256 flops per output element by default); set by --flops-per-element.
extern double g_flops_per_element;

}  // namespace apps
