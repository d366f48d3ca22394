// The host-optimizer part of the public C API (include/karma/karma.h), over HostOptimizer.
#include <string>

#include "include/karma/karma.h"
#include "mpi_shim/host_optimizer/c_api_internal.h"
#include "mpi_shim/host_optimizer/host_optimizer.h"
#include "ground/common/env.h"
#include "ground/common/log.h"

namespace {

using karma::Code;
using karma::Status;
using karma::capi::Guard;
using karma::capi::NullArgument;
namespace ho = karma::hostopt;

static_assert(KARMA_ERR_INVALID_ARGUMENT == static_cast<int>(Code::kInvalidArgument));
static_assert(KARMA_ERR_NOT_FOUND == static_cast<int>(Code::kNotFound));
static_assert(KARMA_ERR_IO == static_cast<int>(Code::kIoError));
static_assert(KARMA_ERR_CORRUPT == static_cast<int>(Code::kCorrupt));
static_assert(KARMA_ERR_UNSUPPORTED == static_cast<int>(Code::kUnsupported));
static_assert(KARMA_ERR_INFEASIBLE == static_cast<int>(Code::kInfeasible));
static_assert(KARMA_ERR_RESOURCE_EXHAUSTED == static_cast<int>(Code::kResourceExhausted));
static_assert(KARMA_ERR_INTERNAL == static_cast<int>(Code::kInternal));
static_assert(KARMA_OPT_ADAMW == static_cast<int>(ho::Algorithm::kAdamW));
static_assert(KARMA_DTYPE_BF16 == static_cast<int>(ho::DType::kBF16));
static_assert(KARMA_ISA_AVX512 == static_cast<int>(ho::Isa::kAvx512));

thread_local std::string g_last_error;

karma::Result<ho::HyperParams> FromC(const karma_opt_hparams* h) {
  if (!h) return NullArgument("hyper-parameters");
  if (h->algorithm < KARMA_OPT_SGD || h->algorithm > KARMA_OPT_ADAMW) {
    return karma::InvalidArgument("unknown algorithm " + std::to_string(h->algorithm));
  }
  ho::HyperParams hp;
  hp.algorithm = static_cast<ho::Algorithm>(h->algorithm);
  hp.nesterov = h->nesterov != 0;
  hp.maximize = h->maximize != 0;
  hp.lr = h->lr;
  hp.weight_decay = h->weight_decay;
  hp.momentum = h->momentum;
  hp.dampening = h->dampening;
  hp.beta1 = h->beta1;
  hp.beta2 = h->beta2;
  hp.eps = h->eps;
  return hp;
}

void ToC(const ho::HyperParams& hp, karma_opt_hparams* h) {
  *h = karma_opt_hparams{};
  h->algorithm = static_cast<int32_t>(hp.algorithm);
  h->nesterov = hp.nesterov;
  h->maximize = hp.maximize;
  h->lr = hp.lr;
  h->weight_decay = hp.weight_decay;
  h->momentum = hp.momentum;
  h->dampening = hp.dampening;
  h->beta1 = hp.beta1;
  h->beta2 = hp.beta2;
  h->eps = hp.eps;
}

// KARMA_HOSTOPT_THREADS and KARMA_HOSTOPT_ISA, for the fields the caller left at 0 / auto.
karma::Result<ho::Options> OptionsFrom(const karma_opt_config* config) {
  karma_opt_config c = config ? *config : karma_opt_config{};
  const karma::EnvConfig env = karma::EnvConfig::FromProcessEnvironment();
  for (const std::string& problem : env.problems()) {
    if (problem.find("KARMA_HOSTOPT_") != std::string::npos) KARMA_LOG(kWarn, "{}", problem);
  }
  ho::Options o;
  o.threads = c.threads;
  if (o.threads == 0) {
    const int64_t t = env.integer(karma::EnvVar::KARMA_HOSTOPT_THREADS);
    if (t < 0 || t > ho::kMaxThreads) {
      KARMA_LOG(kWarn, "KARMA_HOSTOPT_THREADS={} is out of range; using every CPU", t);
    } else {
      o.threads = static_cast<int>(t);
    }
  }
  if (c.isa < KARMA_ISA_AUTO || c.isa > KARMA_ISA_AVX512) return karma::InvalidArgument("unknown isa " + std::to_string(c.isa));
  o.isa = static_cast<ho::Isa>(c.isa);
  if (o.isa == ho::Isa::kAuto) {
    KARMA_ASSIGN_OR_RETURN(o.isa, ho::ParseIsa(env.text(karma::EnvVar::KARMA_HOSTOPT_ISA)));
  }
  if (c.block_elems != 0) o.block_elems = c.block_elems;
  return o;
}

}  // namespace

karma_status karma::capi::Report(const Status& s) {
  if (s.ok()) return KARMA_OK;
  g_last_error = s.message();
  return static_cast<karma_status>(s.code());
}

extern "C" {

const char* karma_status_name(karma_status status) {
  if (status == KARMA_OK) return "ok";
  if (status < KARMA_OK || status > KARMA_ERR_INTERNAL) return "unknown status";
  return karma::CodeName(static_cast<Code>(status));
}

const char* karma_last_error(void) { return g_last_error.c_str(); }

void karma_opt_hparams_default(karma_opt_algorithm algorithm, karma_opt_hparams* out) {
  if (!out) return;
  if (algorithm < KARMA_OPT_SGD || algorithm > KARMA_OPT_ADAMW) algorithm = KARMA_OPT_ADAM;
  ToC(ho::DefaultHyperParams(static_cast<ho::Algorithm>(algorithm)), out);
}

karma_status karma_optimizer_create(const karma_opt_config* config, karma_optimizer** out) {
  return Guard([&]() -> Status {
    if (!out) return NullArgument("out");
    *out = nullptr;
    KARMA_ASSIGN_OR_RETURN(ho::Options options, OptionsFrom(config));
    KARMA_ASSIGN_OR_RETURN(auto impl, ho::HostOptimizer::Create(options));
    *out = new karma_optimizer{std::move(impl)};
    return Status::Ok();
  });
}

void karma_optimizer_destroy(karma_optimizer* opt) { delete opt; }

int32_t karma_optimizer_isa(const karma_optimizer* opt) { return opt ? static_cast<int32_t>(opt->impl->isa()) : 0; }
int32_t karma_optimizer_threads(const karma_optimizer* opt) { return opt ? opt->impl->threads() : 0; }

karma_status karma_optimizer_add_group(karma_optimizer* opt, const karma_opt_hparams* hparams, int32_t* group) {
  return Guard([&]() -> Status {
    if (!opt) return NullArgument("optimizer");
    KARMA_ASSIGN_OR_RETURN(ho::HyperParams hp, FromC(hparams));
    KARMA_ASSIGN_OR_RETURN(int id, opt->impl->AddGroup(hp));
    if (group) *group = id;
    return Status::Ok();
  });
}

karma_status karma_optimizer_set_hparams(karma_optimizer* opt, int32_t group, const karma_opt_hparams* hparams) {
  return Guard([&]() -> Status {
    if (!opt) return NullArgument("optimizer");
    KARMA_ASSIGN_OR_RETURN(ho::HyperParams hp, FromC(hparams));
    return opt->impl->SetHyperParams(group, hp);
  });
}

karma_status karma_optimizer_get_hparams(const karma_optimizer* opt, int32_t group, karma_opt_hparams* out) {
  return Guard([&]() -> Status {
    if (!opt) return NullArgument("optimizer");
    if (!out) return NullArgument("out");
    KARMA_ASSIGN_OR_RETURN(ho::HyperParams hp, opt->impl->GetHyperParams(group));
    ToC(hp, out);
    return Status::Ok();
  });
}

karma_status karma_optimizer_add_tensor(karma_optimizer* opt, int32_t group, const karma_opt_tensor* tensor,
                                        int32_t* index) {
  return Guard([&]() -> Status {
    if (!opt) return NullArgument("optimizer");
    if (!tensor) return NullArgument("tensor");
    if (tensor->dtype != KARMA_DTYPE_F32 && tensor->dtype != KARMA_DTYPE_BF16) {
      return karma::InvalidArgument("unknown dtype " + std::to_string(tensor->dtype));
    }
    ho::TensorSpec spec;
    spec.param = tensor->param;
    spec.grad = tensor->grad;
    spec.numel = tensor->numel;
    spec.dtype = static_cast<ho::DType>(tensor->dtype);
    spec.exp_avg = tensor->exp_avg;
    spec.exp_avg_sq = tensor->exp_avg_sq;
    spec.momentum_buffer = tensor->momentum_buffer;
    spec.master = tensor->master;
    spec.step = tensor->step;
    spec.momentum_buffer_valid = tensor->momentum_buffer_valid != 0;
    KARMA_ASSIGN_OR_RETURN(int id, opt->impl->AddTensor(group, spec));
    if (index) *index = id;
    return Status::Ok();
  });
}

karma_status karma_optimizer_set_pointers(karma_optimizer* opt, int32_t group, int32_t index, void* param,
                                          const void* grad) {
  return Guard([&]() -> Status {
    if (!opt) return NullArgument("optimizer");
    return opt->impl->SetPointers(group, index, param, grad);
  });
}

karma_status karma_optimizer_get_tensor(const karma_optimizer* opt, int32_t group, int32_t index,
                                        karma_opt_tensor* out) {
  return Guard([&]() -> Status {
    if (!opt) return NullArgument("optimizer");
    if (!out) return NullArgument("out");
    KARMA_ASSIGN_OR_RETURN(ho::TensorState s, opt->impl->GetState(group, index));
    *out = karma_opt_tensor{};
    out->param = s.param;
    out->grad = s.grad;
    out->numel = s.numel;
    out->dtype = static_cast<int32_t>(s.dtype);
    out->momentum_buffer_valid = s.momentum_buffer_valid;
    out->step = s.step;
    out->exp_avg = s.exp_avg;
    out->exp_avg_sq = s.exp_avg_sq;
    out->momentum_buffer = s.momentum_buffer;
    out->master = s.master;
    return Status::Ok();
  });
}

karma_status karma_optimizer_set_step(karma_optimizer* opt, int32_t group, int32_t index, int64_t step) {
  return Guard([&]() -> Status {
    if (!opt) return NullArgument("optimizer");
    return opt->impl->SetStep(group, index, step);
  });
}

karma_status karma_optimizer_reload_master(karma_optimizer* opt, int32_t group) {
  return Guard([&]() -> Status {
    if (!opt) return NullArgument("optimizer");
    return opt->impl->ReloadMaster(group);
  });
}

karma_status karma_optimizer_step(karma_optimizer* opt) {
  return Guard([&]() -> Status {
    if (!opt) return NullArgument("optimizer");
    return opt->impl->Step();
  });
}

karma_status karma_optimizer_step_groups(karma_optimizer* opt, const int32_t* groups, size_t count) {
  return Guard([&]() -> Status {
    if (!opt) return NullArgument("optimizer");
    if (!groups && count > 0) return NullArgument("groups");
    return opt->impl->StepGroups(std::span<const int>(groups, count));
  });
}

}  // extern "C"
