// The host-side optimizer: torch.optim SGD (momentum, Nesterov), Adam and AdamW applied on host threads to
// fp32 parameters, or to bf16 parameters through an fp32 master copy, with vector kernels chosen at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mpi_shim/host_optimizer/host_buffer.h"
#include "mpi_shim/host_optimizer/kernels.h"
#include "mpi_shim/host_optimizer/thread_pool.h"
#include "ground/common/status.h"

namespace karma::hostopt {

enum class Algorithm { kSgd = 0, kAdam = 1, kAdamW = 2 };
enum class DType { kF32 = 0, kBF16 = 1 };
enum class Isa { kAuto = 0, kScalar = 1, kAvx2 = 2, kAvx512 = 3 };

const char* AlgorithmName(Algorithm a);
const char* DTypeName(DType d);
size_t DTypeSize(DType d);
const char* IsaName(Isa isa);
// "auto", "scalar", "avx2", "avx512".
Result<Isa> ParseIsa(std::string_view text);
// Built into this library and usable on this CPU and OS (AVX-512 needs F, BW, VL and DQ).
bool IsaSupported(Isa isa);
// The widest supported instruction set.
Isa BestIsa();
const KernelTable& KernelsFor(Isa isa);  // isa must be supported and not kAuto

// The hyper-parameters of one parameter group, with torch.optim's meaning. Momentum, dampening and
// nesterov are SGD's; beta1, beta2 and eps Adam's and AdamW's. weight_decay is L2 added to the gradient
// for SGD and Adam, and decoupled (param *= 1 - lr * weight_decay) for AdamW.
struct HyperParams {
  Algorithm algorithm = Algorithm::kAdam;
  double lr = 1e-3;
  double weight_decay = 0;
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  bool maximize = false;
};

// torch.optim's defaults for the algorithm (AdamW: weight_decay 0.01; SGD has no default lr in PyTorch:
// 0.01 here).
HyperParams DefaultHyperParams(Algorithm a);
// The checks torch.optim makes in its constructors (lr, eps, weight_decay, momentum >= 0; betas in [0, 1);
// Nesterov needs momentum > 0 and dampening 0), plus finiteness.
Status ValidateHyperParams(const HyperParams& hp);
// The fp32 scalars of the update that brings a tensor from step - 1 to `step` (step >= 1).
// `momentum_first`: the SGD momentum buffer does not exist yet (PyTorch's `buf is None`).
StepScalars MakeStepScalars(const HyperParams& hp, int64_t step, bool momentum_first);

// One tensor to register. param and grad are float or uint16_t (bf16 bits) by dtype; a null grad means
// "no gradient" (the tensor is skipped, as PyTorch skips p.grad is None). State pointers left null are
// allocated and owned by the optimizer; state the caller passes is used in place, as is (e.g. the tensors
// of a torch optimizer's state). Pointers the algorithm has no use for are ignored.
struct TensorSpec {
  void* param = nullptr;
  const void* grad = nullptr;
  size_t numel = 0;
  DType dtype = DType::kF32;
  float* exp_avg = nullptr;          // Adam, AdamW
  float* exp_avg_sq = nullptr;       // Adam, AdamW
  float* momentum_buffer = nullptr;  // SGD with momentum != 0
  float* master = nullptr;           // bf16: the fp32 parameters (allocated ones start as the bf16 values)
  int64_t step = 0;                  // updates already applied (PyTorch's state["step"])
  bool momentum_buffer_valid = false;  // the passed momentum buffer already holds PyTorch's buffer
};

// Where a registered tensor's arrays are, and its counters (for checkpoints and the Python helper).
struct TensorState {
  void* param = nullptr;
  const void* grad = nullptr;
  size_t numel = 0;
  DType dtype = DType::kF32;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  float* momentum_buffer = nullptr;
  float* master = nullptr;
  int64_t step = 0;
  bool momentum_buffer_valid = false;
};

inline constexpr int kMaxThreads = 4096;

// A registered tensor: its group and its index in the group.
struct TensorRef {
  int group = 0;
  int tensor = 0;
};

struct Options {
  int threads = 0;                // 0: every CPU this process may run on; at most kMaxThreads
  Isa isa = Isa::kAuto;           // kAuto: BestIsa()
  size_t block_elems = 1 << 16;   // elements per work item; a multiple of 64
};

class HostOptimizer {
 public:
  static Result<std::unique_ptr<HostOptimizer>> Create(const Options& options);
  ~HostOptimizer();

  Result<int> AddGroup(const HyperParams& hp);
  // Returns the tensor's index in its group.
  Result<int> AddTensor(int group, const TensorSpec& spec);
  // New values for a group (an lr schedule); the algorithm and whether momentum is used cannot change.
  Status SetHyperParams(int group, const HyperParams& hp);
  // New arrays for a tensor, e.g. a gradient PyTorch re-allocated; a null param keeps the current one.
  Status SetPointers(int group, int tensor, void* param, const void* grad);
  // Sets the step count of one tensor, or of every tensor of the group when tensor < 0.
  Status SetStep(int group, int tensor, int64_t step);
  // bf16 tensors of the group: master <- the bf16 parameters (after the caller changed the parameters).
  Status ReloadMaster(int group);

  // One update of every tensor of every group (of the given groups) that has a gradient, split into
  // blocks of block_elems across the pool. Calls are serialized.
  Status Step();
  Status StepGroups(std::span<const int> groups);
  // One update of the listed tensors that have a gradient (each listed once): the data-parallel shim updates
  // a tensor as soon as its gradient is reduced.
  Status StepTensors(std::span<const TensorRef> tensors);
  // The tensor whose gradient array starts at `grad` (the buffer an allreduce reduced), if one is registered,
  // with its arrays (its step count there is not kept current). Never waits for a step in progress.
  struct GradientOwner {
    TensorRef ref;
    TensorState arrays;
  };
  std::optional<GradientOwner> FindByGradient(const void* grad) const;

  Result<HyperParams> GetHyperParams(int group) const;
  Result<TensorState> GetState(int group, int tensor) const;
  int num_groups() const;
  Result<int> num_tensors(int group) const;
  Isa isa() const { return isa_; }
  int threads() const { return pool_->size(); }
  ThreadPool& pool() { return *pool_; }

 private:
  struct Tensor;
  struct Group;
  struct WorkItem {
    const Tensor* tensor;
    size_t begin, end;
  };
  HostOptimizer(const Options& options, Isa isa, std::unique_ptr<ThreadPool> pool);
  Result<Group*> FindGroup(int group) const;
  Result<Tensor*> FindTensor(int group, int tensor) const;
  static TensorState StateOf(const Tensor& t);
  void IndexGradient(const void* old_grad, int group, int tensor, const Tensor& t);
  struct Selected {
    Group* group;
    Tensor* tensor;
  };
  Status StepLocked(std::span<const Selected> tensors);

  const KernelTable* kernels_;
  Isa isa_;
  size_t block_elems_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<std::unique_ptr<Group>> groups_;
  std::vector<WorkItem> items_;  // reused by every step
  // Gradient array -> tensor, under its own lock (taken after mu_ by writers) so that lookups do not wait
  // for a step.
  mutable std::mutex by_gradient_mu_;
  std::unordered_map<const void*, GradientOwner> by_gradient_;
  mutable std::mutex mu_;
};

}  // namespace karma::hostopt
