// HostOptimizer: parameter groups, state ownership, per-step scalars, and the dispatch of blocks to the pool.
#include "mpi_shim/host_optimizer/host_optimizer.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>

#include "mpi_shim/host_optimizer/bf16.h"

#if KARMA_HOSTOPT_X86
#include <xmmintrin.h>
#endif

namespace karma::hostopt {

struct HostOptimizer::Tensor {
  KernelTensor kt;
  size_t numel = 0;
  DType dtype = DType::kF32;
  int64_t step = 0;
  bool momentum_valid = false;
  HostBuffer owned_exp_avg, owned_exp_avg_sq, owned_momentum, owned_master;
  // Of the step in progress: written before the pool runs, read by every worker.
  StepScalars scalars;
  KernelFn kernel = nullptr;
};

struct HostOptimizer::Group {
  HyperParams hp;
  std::vector<std::unique_ptr<Tensor>> tensors;
};

const char* AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kSgd: return "sgd";
    case Algorithm::kAdam: return "adam";
    case Algorithm::kAdamW: return "adamw";
  }
  return "?";
}

const char* DTypeName(DType d) { return d == DType::kBF16 ? "bf16" : "fp32"; }
size_t DTypeSize(DType d) { return d == DType::kBF16 ? 2 : 4; }

HyperParams DefaultHyperParams(Algorithm a) {
  HyperParams hp;
  hp.algorithm = a;
  if (a == Algorithm::kSgd) hp.lr = 0.01;
  if (a == Algorithm::kAdamW) hp.weight_decay = 0.01;
  return hp;
}

Status ValidateHyperParams(const HyperParams& hp) {
  if (hp.algorithm != Algorithm::kSgd && hp.algorithm != Algorithm::kAdam && hp.algorithm != Algorithm::kAdamW) {
    return InvalidArgument("unknown optimizer algorithm " + std::to_string(static_cast<int>(hp.algorithm)));
  }
  const std::pair<const char*, double> values[] = {{"lr", hp.lr},           {"weight_decay", hp.weight_decay},
                                                   {"momentum", hp.momentum}, {"dampening", hp.dampening},
                                                   {"beta1", hp.beta1},     {"beta2", hp.beta2},
                                                   {"eps", hp.eps}};
  for (const auto& [name, v] : values) {
    if (!std::isfinite(v)) return InvalidArgument(std::string("optimizer: ") + name + " is not finite");
  }
  if (hp.lr < 0) return InvalidArgument("optimizer: invalid learning rate " + std::to_string(hp.lr) + " (must be >= 0)");
  if (hp.weight_decay < 0) return InvalidArgument("optimizer: invalid weight_decay (must be >= 0)");
  if (hp.algorithm == Algorithm::kSgd) {
    if (hp.momentum < 0) return InvalidArgument("optimizer: invalid momentum (must be >= 0)");
    if (hp.nesterov && (hp.momentum <= 0 || hp.dampening != 0)) {
      return InvalidArgument("optimizer: Nesterov momentum requires a momentum and zero dampening");
    }
  } else {
    if (hp.eps < 0) return InvalidArgument("optimizer: invalid eps (must be >= 0)");
    if (hp.beta1 < 0 || hp.beta1 >= 1) return InvalidArgument("optimizer: invalid beta1 (must be in [0, 1))");
    if (hp.beta2 < 0 || hp.beta2 >= 1) return InvalidArgument("optimizer: invalid beta2 (must be in [0, 1))");
  }
  return Status::Ok();
}

StepScalars MakeStepScalars(const HyperParams& hp, int64_t step, bool momentum_first) {
  StepScalars s;
  s.grad_sign = hp.maximize ? 0x80000000u : 0u;
  s.weight_decay = static_cast<float>(hp.weight_decay);
  if (hp.algorithm == Algorithm::kSgd) {
    s.use_weight_decay = hp.weight_decay != 0;
    s.neg_lr = static_cast<float>(-hp.lr);
    s.use_momentum = hp.momentum != 0;
    s.momentum = static_cast<float>(hp.momentum);
    s.one_minus_dampening = static_cast<float>(1 - hp.dampening);
    s.momentum_first = momentum_first;
    s.nesterov = hp.nesterov;
    return s;
  }
  // As in torch.optim's single-tensor Adam: the bias corrections in double, each scalar rounded once.
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1 - std::pow(hp.beta1, t);
  const double bias_correction2 = 1 - std::pow(hp.beta2, t);
  s.use_weight_decay = hp.algorithm == Algorithm::kAdam && hp.weight_decay != 0;
  s.beta1 = static_cast<float>(hp.beta1);
  s.one_minus_beta1 = static_cast<float>(1 - hp.beta1);
  s.beta2 = static_cast<float>(hp.beta2);
  s.one_minus_beta2 = static_cast<float>(1 - hp.beta2);
  s.neg_step_size = static_cast<float>(-(hp.lr / bias_correction1));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(hp.eps);
  s.decay_factor = hp.algorithm == Algorithm::kAdamW ? static_cast<float>(1 - hp.lr * hp.weight_decay) : 1.0f;
  return s;
}

namespace {

int DefaultThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// Round to nearest, no flush-to-zero, no denormals-are-zero, for the duration of one work item: the caller's
// thread (worker 0) may have changed its MXCSR (torch.set_flush_denormal does), and the results must not depend
// on which worker ran a block.
class StandardFpEnvironment {
 public:
#if KARMA_HOSTOPT_X86
  StandardFpEnvironment() : saved_(_mm_getcsr()), changed_((saved_ & ~kFlags) != kStandard) {
    if (changed_) _mm_setcsr(kStandard);
  }
  ~StandardFpEnvironment() {
    if (changed_) _mm_setcsr(saved_);
  }

 private:
  static constexpr unsigned kStandard = 0x1F80;  // every exception masked, round to nearest, no FTZ/DAZ
  static constexpr unsigned kFlags = 0x3F;       // the sticky exception flags, which do not matter
  unsigned saved_;
  bool changed_;
#endif
};

bool Aligned(const void* p, size_t alignment) { return reinterpret_cast<uintptr_t>(p) % alignment == 0; }

}  // namespace

HostOptimizer::HostOptimizer(const Options& options, Isa isa, std::unique_ptr<ThreadPool> pool)
    : kernels_(&KernelsFor(isa)), isa_(isa), block_elems_(options.block_elems), pool_(std::move(pool)) {}

HostOptimizer::~HostOptimizer() = default;

Result<std::unique_ptr<HostOptimizer>> HostOptimizer::Create(const Options& options) {
  if (options.threads < 0 || options.threads > kMaxThreads) {
    return InvalidArgument("host optimizer: threads must be in [0, " + std::to_string(kMaxThreads) +
                           "] (0: every CPU), got " + std::to_string(options.threads));
  }
  if (options.block_elems == 0 || options.block_elems % 64 != 0) {
    return InvalidArgument("host optimizer: block_elems must be a positive multiple of 64, got " +
                           std::to_string(options.block_elems));
  }
  Isa isa = options.isa == Isa::kAuto ? BestIsa() : options.isa;
  if (!IsaSupported(isa)) {
    return Unsupported(std::string("host optimizer: this CPU (or this build) cannot run ") + IsaName(isa));
  }
  KARMA_ASSIGN_OR_RETURN(auto pool, ThreadPool::Create(options.threads == 0 ? DefaultThreads() : options.threads));
  return std::unique_ptr<HostOptimizer>(new HostOptimizer(options, isa, std::move(pool)));
}

Result<HostOptimizer::Group*> HostOptimizer::FindGroup(int group) const {
  if (group < 0 || static_cast<size_t>(group) >= groups_.size()) {
    return NotFound("host optimizer: no parameter group " + std::to_string(group));
  }
  return groups_[static_cast<size_t>(group)].get();
}

Result<HostOptimizer::Tensor*> HostOptimizer::FindTensor(int group, int tensor) const {
  KARMA_ASSIGN_OR_RETURN(Group * g, FindGroup(group));
  if (tensor < 0 || static_cast<size_t>(tensor) >= g->tensors.size()) {
    return NotFound("host optimizer: group " + std::to_string(group) + " has no tensor " + std::to_string(tensor));
  }
  return g->tensors[static_cast<size_t>(tensor)].get();
}

Result<int> HostOptimizer::AddGroup(const HyperParams& hp) {
  KARMA_RETURN_IF_ERROR(ValidateHyperParams(hp));
  std::lock_guard lock(mu_);
  groups_.push_back(std::make_unique<Group>());
  groups_.back()->hp = hp;
  return static_cast<int>(groups_.size() - 1);
}

namespace {

// Points an unset state slot at a new zeroed array owned by the tensor.
Status AllocateMissing(float** slot, HostBuffer* owned, size_t numel, ThreadPool* pool) {
  if (*slot || numel == 0) return Status::Ok();
  KARMA_ASSIGN_OR_RETURN(*owned, HostBuffer::Allocate(numel * sizeof(float), pool));
  *slot = owned->as<float>();
  return Status::Ok();
}

void CopyBf16ToMaster(const uint16_t* param, float* master, size_t numel, ThreadPool& pool) {
  constexpr size_t kChunk = size_t{1} << 20;
  pool.ParallelFor((numel + kChunk - 1) / kChunk, [&](size_t c, int) {
    const size_t end = std::min(numel, (c + 1) * kChunk);
    for (size_t i = c * kChunk; i < end; ++i) master[i] = Bf16ToFloat(param[i]);
  });
}

}  // namespace

Result<int> HostOptimizer::AddTensor(int group, const TensorSpec& spec) {
  std::lock_guard lock(mu_);
  KARMA_ASSIGN_OR_RETURN(Group * g, FindGroup(group));
  if (spec.dtype != DType::kF32 && spec.dtype != DType::kBF16) {
    return InvalidArgument("host optimizer: unknown dtype " + std::to_string(static_cast<int>(spec.dtype)));
  }
  if (spec.numel > (SIZE_MAX / 8)) return InvalidArgument("host optimizer: tensor too large");
  if (spec.numel > 0 && spec.param == nullptr) return InvalidArgument("host optimizer: null parameter pointer");
  const size_t elem = DTypeSize(spec.dtype);
  if (!Aligned(spec.param, elem) || !Aligned(spec.grad, elem)) {
    return InvalidArgument(std::string("host optimizer: ") + DTypeName(spec.dtype) +
                           " parameter and gradient must be aligned to their element size");
  }
  for (const float* p : {spec.exp_avg, spec.exp_avg_sq, spec.momentum_buffer, spec.master}) {
    if (!Aligned(p, alignof(float))) return InvalidArgument("host optimizer: state arrays must be 4-byte aligned");
  }
  if (spec.step < 0) return InvalidArgument("host optimizer: step must be >= 0");

  auto t = std::make_unique<Tensor>();
  t->numel = spec.numel;
  t->dtype = spec.dtype;
  t->step = spec.step;
  t->kt.param = spec.param;
  t->kt.grad = spec.grad;
  const bool adam = g->hp.algorithm != Algorithm::kSgd;
  const bool momentum = g->hp.algorithm == Algorithm::kSgd && g->hp.momentum != 0;
  if (adam) {
    t->kt.exp_avg = spec.exp_avg;
    t->kt.exp_avg_sq = spec.exp_avg_sq;
  }
  if (momentum) {
    t->kt.momentum_buffer = spec.momentum_buffer;
    t->momentum_valid = spec.momentum_buffer != nullptr && spec.momentum_buffer_valid;
  }
  if (spec.dtype == DType::kBF16) {
    t->kt.master = spec.master;
    if (!t->kt.master) {
      KARMA_RETURN_IF_ERROR(AllocateMissing(&t->kt.master, &t->owned_master, t->numel, pool_.get()));
      if (t->numel > 0) CopyBf16ToMaster(static_cast<const uint16_t*>(t->kt.param), t->kt.master, t->numel, *pool_);
    }
  }
  if (adam) {
    KARMA_RETURN_IF_ERROR(AllocateMissing(&t->kt.exp_avg, &t->owned_exp_avg, t->numel, pool_.get()));
    KARMA_RETURN_IF_ERROR(AllocateMissing(&t->kt.exp_avg_sq, &t->owned_exp_avg_sq, t->numel, pool_.get()));
  }
  if (momentum) {
    KARMA_RETURN_IF_ERROR(AllocateMissing(&t->kt.momentum_buffer, &t->owned_momentum, t->numel, pool_.get()));
  }
  g->tensors.push_back(std::move(t));
  const int index = static_cast<int>(g->tensors.size() - 1);
  IndexGradient(nullptr, group, index, *g->tensors.back());
  return index;
}

void HostOptimizer::IndexGradient(const void* old_grad, int group, int tensor, const Tensor& t) {
  std::lock_guard lock(by_gradient_mu_);
  if (old_grad) {
    auto it = by_gradient_.find(old_grad);
    if (it != by_gradient_.end() && it->second.ref.group == group && it->second.ref.tensor == tensor) {
      by_gradient_.erase(it);
    }
  }
  if (t.kt.grad) by_gradient_[t.kt.grad] = GradientOwner{TensorRef{group, tensor}, StateOf(t)};
}

Status HostOptimizer::SetHyperParams(int group, const HyperParams& hp) {
  KARMA_RETURN_IF_ERROR(ValidateHyperParams(hp));
  std::lock_guard lock(mu_);
  KARMA_ASSIGN_OR_RETURN(Group * g, FindGroup(group));
  const HyperParams& old = g->hp;
  const bool old_adam = old.algorithm != Algorithm::kSgd, new_adam = hp.algorithm != Algorithm::kSgd;
  // Adam and AdamW share their state; anything else would silently start from a state that does not exist.
  if (old_adam != new_adam) {
    return InvalidArgument(std::string("host optimizer: cannot change a group from ") + AlgorithmName(old.algorithm) +
                           " to " + AlgorithmName(hp.algorithm));
  }
  if (!new_adam && hp.momentum != 0 && old.momentum == 0) {
    for (size_t i = 0; i < g->tensors.size(); ++i) {
      Tensor& t = *g->tensors[i];
      KARMA_RETURN_IF_ERROR(AllocateMissing(&t.kt.momentum_buffer, &t.owned_momentum, t.numel, pool_.get()));
      t.momentum_valid = false;
      IndexGradient(nullptr, group, static_cast<int>(i), t);
    }
  }
  g->hp = hp;
  return Status::Ok();
}

Status HostOptimizer::SetPointers(int group, int tensor, void* param, const void* grad) {
  std::lock_guard lock(mu_);
  KARMA_ASSIGN_OR_RETURN(Tensor * t, FindTensor(group, tensor));
  const size_t elem = DTypeSize(t->dtype);
  if (!Aligned(param, elem) || !Aligned(grad, elem)) {
    return InvalidArgument("host optimizer: parameter and gradient must be aligned to their element size");
  }
  if (param) t->kt.param = param;
  const void* old_grad = t->kt.grad;
  t->kt.grad = grad;
  IndexGradient(old_grad, group, tensor, *t);
  return Status::Ok();
}

Status HostOptimizer::SetStep(int group, int tensor, int64_t step) {
  if (step < 0) return InvalidArgument("host optimizer: step must be >= 0");
  std::lock_guard lock(mu_);
  if (tensor < 0) {
    KARMA_ASSIGN_OR_RETURN(Group * g, FindGroup(group));
    for (auto& t : g->tensors) t->step = step;
    return Status::Ok();
  }
  KARMA_ASSIGN_OR_RETURN(Tensor * t, FindTensor(group, tensor));
  t->step = step;
  return Status::Ok();
}

Status HostOptimizer::ReloadMaster(int group) {
  std::lock_guard lock(mu_);
  KARMA_ASSIGN_OR_RETURN(Group * g, FindGroup(group));
  for (auto& t : g->tensors) {
    if (t->dtype == DType::kBF16 && t->numel > 0) {
      CopyBf16ToMaster(static_cast<const uint16_t*>(t->kt.param), t->kt.master, t->numel, *pool_);
    }
  }
  return Status::Ok();
}

Status HostOptimizer::Step() {
  std::lock_guard lock(mu_);
  std::vector<Selected> all;
  for (auto& g : groups_) {
    for (auto& t : g->tensors) all.push_back({g.get(), t.get()});
  }
  return StepLocked(all);
}

Status HostOptimizer::StepGroups(std::span<const int> groups) {
  std::lock_guard lock(mu_);
  std::vector<Group*> seen;
  std::vector<Selected> selected;
  for (int id : groups) {
    KARMA_ASSIGN_OR_RETURN(Group * g, FindGroup(id));
    // Twice in one step would race two workers on the same elements.
    if (std::find(seen.begin(), seen.end(), g) != seen.end()) {
      return InvalidArgument("host optimizer: group " + std::to_string(id) + " listed twice in one step");
    }
    seen.push_back(g);
    for (auto& t : g->tensors) selected.push_back({g, t.get()});
  }
  return StepLocked(selected);
}

Status HostOptimizer::StepTensors(std::span<const TensorRef> tensors) {
  std::lock_guard lock(mu_);
  std::vector<Selected> selected;
  selected.reserve(tensors.size());
  for (const TensorRef& ref : tensors) {
    KARMA_ASSIGN_OR_RETURN(Group * g, FindGroup(ref.group));
    KARMA_ASSIGN_OR_RETURN(Tensor * t, FindTensor(ref.group, ref.tensor));
    for (const Selected& s : selected) {
      if (s.tensor == t) {
        return InvalidArgument("host optimizer: tensor " + std::to_string(ref.tensor) + " of group " +
                               std::to_string(ref.group) + " listed twice in one step");
      }
    }
    selected.push_back({g, t});
  }
  return StepLocked(selected);
}

std::optional<HostOptimizer::GradientOwner> HostOptimizer::FindByGradient(const void* grad) const {
  std::lock_guard lock(by_gradient_mu_);
  auto it = by_gradient_.find(grad);
  if (it == by_gradient_.end()) return std::nullopt;
  return it->second;
}

Status HostOptimizer::StepLocked(std::span<const Selected> tensors) {
  items_.clear();
  for (const Selected& s : tensors) {
    Tensor* t = s.tensor;
    if (!t->kt.grad || t->numel == 0) continue;
    const bool sgd_momentum = s.group->hp.algorithm == Algorithm::kSgd && s.group->hp.momentum != 0;
    t->scalars = MakeStepScalars(s.group->hp, t->step + 1, sgd_momentum && !t->momentum_valid);
    t->kernel = kernels_->fn[static_cast<int>(s.group->hp.algorithm)][static_cast<int>(t->dtype)];
    for (size_t b = 0; b < t->numel; b += block_elems_) {
      items_.push_back({t, b, std::min(t->numel, b + block_elems_)});
    }
  }
  pool_->ParallelFor(items_.size(), [this](size_t i, int) {
    const WorkItem& w = items_[i];
    StandardFpEnvironment fp;
    w.tensor->kernel(w.tensor->kt, w.begin, w.end, w.tensor->scalars);
  });
  for (const Selected& s : tensors) {
    Tensor* t = s.tensor;
    if (!t->kt.grad || t->numel == 0) continue;
    ++t->step;
    if (s.group->hp.algorithm == Algorithm::kSgd && s.group->hp.momentum != 0) t->momentum_valid = true;
  }
  return Status::Ok();
}

Result<HyperParams> HostOptimizer::GetHyperParams(int group) const {
  std::lock_guard lock(mu_);
  KARMA_ASSIGN_OR_RETURN(Group * g, FindGroup(group));
  return g->hp;
}

Result<TensorState> HostOptimizer::GetState(int group, int tensor) const {
  std::lock_guard lock(mu_);
  KARMA_ASSIGN_OR_RETURN(Tensor * t, FindTensor(group, tensor));
  return StateOf(*t);
}

TensorState HostOptimizer::StateOf(const Tensor& t) {
  TensorState s;
  s.param = t.kt.param;
  s.grad = t.kt.grad;
  s.numel = t.numel;
  s.dtype = t.dtype;
  s.exp_avg = t.kt.exp_avg;
  s.exp_avg_sq = t.kt.exp_avg_sq;
  s.momentum_buffer = t.kt.momentum_buffer;
  s.master = t.kt.master;
  s.step = t.step;
  s.momentum_buffer_valid = t.momentum_valid;
  return s;
}

int HostOptimizer::num_groups() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(groups_.size());
}

Result<int> HostOptimizer::num_tensors(int group) const {
  std::lock_guard lock(mu_);
  KARMA_ASSIGN_OR_RETURN(Group * g, FindGroup(group));
  return static_cast<int>(g->tensors.size());
}

}  // namespace karma::hostopt
