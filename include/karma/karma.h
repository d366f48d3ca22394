/* The public C interface of KARMA (optional: LD_PRELOAD=libkarma.so works without it). */
#ifndef KARMA_KARMA_H_
#define KARMA_KARMA_H_

#define KARMA_VERSION_MAJOR 0
#define KARMA_VERSION_MINOR 1
#define KARMA_VERSION_PATCH 0
#define KARMA_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the start of a training iteration. Once called, iterations are taken from these calls instead of being
   detected from the launch sequence; the iteration after KARMA_WARMUP_ITERATIONS marked ones is recorded.
   Exported by libkarma.so: an application that may run without it looks it up with
   dlsym(RTLD_DEFAULT, "karma_iteration_begin") and calls it only when found. */
void karma_iteration_begin(void);

/* The version of the loaded libkarma.so, "MAJOR.MINOR.PATCH". */
const char* karma_version(void);

#ifdef __cplusplus
}
#endif

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status ------------------------------------------------------------------------------------------------
 * Every call that can fail returns a karma_status; karma_last_error() then says why, in words. */
typedef enum karma_status {
  KARMA_OK = 0,
  KARMA_ERR_INVALID_ARGUMENT = 1,
  KARMA_ERR_NOT_FOUND = 2,
  KARMA_ERR_IO = 3,
  KARMA_ERR_CORRUPT = 4,
  KARMA_ERR_UNSUPPORTED = 5,
  KARMA_ERR_INFEASIBLE = 6,
  KARMA_ERR_RESOURCE_EXHAUSTED = 7,
  KARMA_ERR_INTERNAL = 8
} karma_status;

/* "ok", "invalid argument", ... */
const char* karma_status_name(karma_status status);
/* The message of the last failed call on the calling thread ("" when none); valid until its next call. */
const char* karma_last_error(void);

/* ---- Host optimizer -----------------------------------------------------------------------------------------
 * torch.optim's SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW (amsgrad off), applied on
 * host threads to parameters in host memory. fp32 parameters are updated in place; bf16 parameters keep an
 * fp32 master copy that receives the update, and the bf16 array receives its rounding (nearest even). Optimizer
 * state is fp32. Vector kernels (AVX-512, AVX2, scalar) are chosen at run time; the results do not depend on
 * the kernels or the thread count (see mpi_shim/host_optimizer/README.md).
 *
 * Usage: create; add a group per set of hyper-parameters; add its tensors; each iteration, set new gradient
 * pointers if they moved and call karma_optimizer_step (or karma_optimizer_step_groups for the groups whose
 * gradients are ready). Calls on one optimizer are serialized internally. Structures are passed by pointer
 * and are plain data, so that ctypes can describe them. */

typedef enum karma_opt_algorithm { KARMA_OPT_SGD = 0, KARMA_OPT_ADAM = 1, KARMA_OPT_ADAMW = 2 } karma_opt_algorithm;
typedef enum karma_dtype { KARMA_DTYPE_F32 = 0, KARMA_DTYPE_BF16 = 1 } karma_dtype;
typedef enum karma_isa { KARMA_ISA_AUTO = 0, KARMA_ISA_SCALAR = 1, KARMA_ISA_AVX2 = 2, KARMA_ISA_AVX512 = 3 } karma_isa;

typedef struct karma_opt_config {
  int32_t threads;     /* 0: KARMA_HOSTOPT_THREADS, else every CPU the process may use */
  int32_t isa;         /* a karma_isa; KARMA_ISA_AUTO: KARMA_HOSTOPT_ISA, else the widest the CPU has */
  uint64_t block_elems; /* elements per work item, a multiple of 64; 0: 65536 */
} karma_opt_config;

/* One parameter group's hyper-parameters, with torch.optim's meaning. weight_decay is L2 added to the gradient
 * for SGD and Adam, decoupled (param *= 1 - lr * weight_decay) for AdamW. */
typedef struct karma_opt_hparams {
  int32_t algorithm; /* a karma_opt_algorithm */
  int32_t nesterov;  /* SGD; needs momentum > 0 and dampening == 0 */
  int32_t maximize;
  int32_t reserved;  /* 0 */
  double lr;
  double weight_decay;
  double momentum;   /* SGD */
  double dampening;  /* SGD */
  double beta1;      /* Adam, AdamW */
  double beta2;
  double eps;
} karma_opt_hparams;

/* torch.optim's defaults for the algorithm (SGD, which has none in PyTorch: lr 0.01). */
void karma_opt_hparams_default(karma_opt_algorithm algorithm, karma_opt_hparams* out);

/* One tensor. param and grad hold float or bf16 bits (uint16_t) by dtype; grad may be NULL (no gradient yet:
 * the tensor is skipped by steps, as PyTorch skips p.grad None). State pointers left NULL are allocated,
 * zeroed and owned by the optimizer (an allocated master starts as the bf16 parameters); state passed in is
 * used in place as it is, e.g. the tensors of a torch optimizer's state. */
typedef struct karma_opt_tensor {
  void* param;
  const void* grad;
  uint64_t numel;
  int32_t dtype;                 /* a karma_dtype */
  int32_t momentum_buffer_valid; /* the momentum buffer passed in already holds PyTorch's buffer */
  int64_t step;                  /* updates already applied (PyTorch's state["step"]) */
  float* exp_avg;                /* Adam, AdamW */
  float* exp_avg_sq;             /* Adam, AdamW */
  float* momentum_buffer;        /* SGD with momentum */
  float* master;                 /* bf16 parameters */
} karma_opt_tensor;

typedef struct karma_optimizer karma_optimizer;

/* config may be NULL (every field 0). */
karma_status karma_optimizer_create(const karma_opt_config* config, karma_optimizer** out);
void karma_optimizer_destroy(karma_optimizer* opt);
/* The instruction set chosen (a karma_isa) and the number of threads that run a step. */
int32_t karma_optimizer_isa(const karma_optimizer* opt);
int32_t karma_optimizer_threads(const karma_optimizer* opt);

karma_status karma_optimizer_add_group(karma_optimizer* opt, const karma_opt_hparams* hparams, int32_t* group);
/* New hyper-parameters (an lr schedule); a group cannot change between SGD and Adam/AdamW. */
karma_status karma_optimizer_set_hparams(karma_optimizer* opt, int32_t group, const karma_opt_hparams* hparams);
karma_status karma_optimizer_get_hparams(const karma_optimizer* opt, int32_t group, karma_opt_hparams* out);
karma_status karma_optimizer_add_tensor(karma_optimizer* opt, int32_t group, const karma_opt_tensor* tensor,
                                        int32_t* index);
/* A moved parameter (NULL: unchanged) and gradient (NULL: none) of a registered tensor. */
karma_status karma_optimizer_set_pointers(karma_optimizer* opt, int32_t group, int32_t index, void* param,
                                          const void* grad);
/* Where the tensor's arrays are (the optimizer's own state included) and its step count. */
karma_status karma_optimizer_get_tensor(const karma_optimizer* opt, int32_t group, int32_t index,
                                        karma_opt_tensor* out);
/* The step count of one tensor, or of every tensor of the group when index < 0. */
karma_status karma_optimizer_set_step(karma_optimizer* opt, int32_t group, int32_t index, int64_t step);
/* bf16 tensors of the group: master <- parameters, after the caller changed the parameters. */
karma_status karma_optimizer_reload_master(karma_optimizer* opt, int32_t group);

/* One update of every tensor that has a gradient, in every group or in the listed groups. */
karma_status karma_optimizer_step(karma_optimizer* opt);
karma_status karma_optimizer_step_groups(karma_optimizer* opt, const int32_t* groups, size_t count);

/* ---- Data parallel (libkarma_mpi.so) ------------------------------------------------------------------------
 * libkarma_mpi.so, preloaded into the ranks of an Open MPI program (mpirun -x LD_PRELOAD=.../libkarma_mpi.so),
 * takes over MPI_Allreduce and MPI_Iallreduce with no change to the program: the allreduces of an iteration
 * are grouped into phases (MG-WFBP merge rule) and reduced in rank order by one communication thread. It
 * exports the karma_optimizer_* functions above and the karma_dp_* ones below; an application that may run
 * without it looks them up with dlsym(RTLD_DEFAULT, ...). See mpi_shim/README.md. */

/* Host updates as gradients are reduced (the paper's pipeline): once the allreduce whose receive buffer is
 * the gradient array of a tensor registered in opt has completed, the shim applies that tensor's update on the
 * host, and only then completes the caller's request (MPI_Wait returns with the parameters updated). The
 * application then skips its own optimizer step for those tensors. Several optimizers may be attached. */
karma_status karma_dp_attach_optimizer(karma_optimizer* opt);
karma_status karma_dp_detach_optimizer(karma_optimizer* opt);

/* Where the data of the buffers the shim touches on the host should be: a runtime that places memory (the
 * libkarma.so replay executor) installs these; without them the shim moves whole 64 KiB pages of CUDA managed
 * memory itself with cudaMemPrefetchAsync (KARMA_MPI_PREFETCH). Called on the shim's threads. */
typedef struct karma_dp_memory_hooks {
  void* ctx;
  /* [ptr, ptr + bytes) is about to be read or written on the host (gradients before a reduction; parameters
   * and optimizer state before a host update). */
  void (*to_host)(void* ctx, const void* ptr, size_t bytes);
  /* Returns once every to_host issued so far has taken effect. */
  void (*sync)(void* ctx);
  /* The host is done with [ptr, ptr + bytes): a reduced gradient the device will read, or parameters the host
   * just updated, needed by the next forward pass. */
  void (*to_device)(void* ctx, const void* ptr, size_t bytes);
} karma_dp_memory_hooks;

/* hooks NULL: back to the built-in behaviour. */
karma_status karma_dp_set_memory_hooks(const karma_dp_memory_hooks* hooks);

typedef struct karma_dp_stats {
  int32_t active;       /* the shim runs (MPI initialized with MPI_THREAD_MULTIPLE, KARMA_MPI=1) */
  int32_t rank, size;   /* in MPI_COMM_WORLD */
  int32_t reserved;
  uint64_t rounds;      /* rounds of allreduces (the calls between two waits) */
  uint64_t planned_rounds; /* rounds that followed a merge plan */
  uint64_t calls;       /* allreduces of the application taken over */
  uint64_t groups;      /* collective reductions the communication thread ran for them */
  uint64_t bytes;       /* bytes reduced */
  uint64_t host_updates; /* tensors updated on the host by an attached optimizer */
  uint64_t prefetched_bytes; /* bytes moved by the built-in memory hooks (both directions) */
  double alpha_s;       /* the cost model: start-up seconds of one allreduce */
  double beta_s_per_byte; /* and seconds per byte */
} karma_dp_stats;

karma_status karma_dp_get_stats(karma_dp_stats* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KARMA_KARMA_H_ */
