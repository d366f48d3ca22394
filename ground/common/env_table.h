// THE table of every KARMA_* environment variable: name, type, default, accepted values, one-line help.
// Everything else (the enum, `karma-trace env`, validation, the runtime's configuration) derives from it.
#pragma once

// X(NAME, TYPE, DEFAULT, CHOICES, HELP). TYPE is an EnvType enumerator; CHOICES is "a|b|c" for enums.
#define KARMA_ENV_TABLE(X)                                                                                      \
  X(KARMA_CAPACITY, kCapacity, "0.9", "",                                                                       \
    "Device memory KARMA may fill with tensors: bytes with a unit (512MiB, 16GiB) or a fraction of the "        \
    "device memory free when KARMA starts (0.8).")                                                              \
  X(KARMA_MODE, kEnum, "auto", "auto|record|replay|um|off",                                                     \
    "auto: record an iteration, plan, then replay; record: record only; replay: run KARMA_PLAN; um: managed "   \
    "memory paging without a plan; off: pass everything through.")                                              \
  X(KARMA_TRACE_DIR, kPath, "karma-traces", "",                                                                 \
    "Directory where recorded iterations (.ktrace) and plans are written; created when missing.")               \
  X(KARMA_LOG, kEnum, "warn", "error|warn|info|debug", "How much KARMA writes to stderr.")                      \
  X(KARMA_PLAN, kString, "", "",                                                                                \
    "Path of the plan file KARMA_MODE=replay runs (written next to the recorded trace by KARMA_MODE=auto); "    \
    "empty: none.")                                                                                             \
  X(KARMA_SOLVER, kEnum, "ilp", "ilp|heuristic",                                                                \
    "How KARMA_MODE=auto plans: heuristic (Planner I's search); ilp: that plan first, then Planner II's GLPK "  \
    "models on the background thread (6 s at most), whose plan replaces it when it simulates 5% faster.")         \
  X(KARMA_ITERATION_MARKER, kString, "", "",                                                                    \
    "Name of an NVTX range (nvtxRangePushA) that starts each training iteration; empty: iterations are "        \
    "detected from the repeating launch sequence (karma_iteration_begin() also marks them).")                   \
  X(KARMA_WARMUP_ITERATIONS, kInt, "1", "",                                                                     \
    "With explicit iteration markers: how many marked iterations run before the one that is recorded.")         \
  X(KARMA_ARENA_SEGMENT, kBytes, "256MiB", "",                                                                  \
    "Size of each managed-memory segment the allocation arena reserves (larger requests get their own).")       \
  X(KARMA_BATCH_MOVES, kBool, "1", "",                                                                         \
    "Issue the prefetches and evictions that leave at one point as one batched managed-memory call; 0: one "      \
    "call per range (on an H100 the batched call blocked the calling thread for its transfer).")                \
  X(KARMA_MOVE_THREADS, kBool, "1", "",                                                                        \
    "Issue the plan's prefetches and evictions from two threads of KARMA's own (one per direction), so that the " \
    "application's launches wait only where they need the data; 0: inside the application's launches (on an "    \
    "H100 a batched call holds its caller for the transfer).")                                                  \
  X(KARMA_RESIDENCY, kEnum, "managed", "auto|copy|managed",                                                  \
    "How the plan moves data: copy (device memory KARMA owns through CUDA's virtual memory API, pinned host "    \
    "chunks, copy engines; a pool that never holds more than KARMA_CAPACITY), managed (the paper's: managed "    \
    "memory, prefetches and evictions), auto: copy where the device supports host chunks, else managed.")      \
  X(KARMA_ALLOCATORS, kEnum, "per-tensor", "per-tensor|keep",                                                \
    "Frameworks' device allocators when KARMA plans (KARMA_MODE auto, record, replay): per-tensor sets, at "     \
    "load, the switches that make PyTorch, TensorFlow and JAX allocate each tensor (PYTORCH_ALLOC_CONF and "     \
    "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, TF_GPU_ALLOCATOR=cuda_malloc_async, "                       \
    "XLA_PYTHON_CLIENT_ALLOCATOR=platform, XLA_PYTHON_CLIENT_PREALLOCATE=false), each unless the application "  \
    "set it; keep: none of them (each segment a framework allocates is then one buffer, kept whole).")          \
  X(KARMA_LIVE, kBool, "1", "",                                                                                 \
    "Publish live statistics in shared memory (karma-<pid>, owner-only) for `karma-trace top PID`.")                                      \
  X(KARMA_HOSTOPT_THREADS, kInt, "0", "",                                                                       \
    "Host threads that run optimizer updates (karma_optimizer_create); 0: every CPU the process may use.")     \
  X(KARMA_HOSTOPT_ISA, kEnum, "auto", "auto|avx512|avx2|scalar",                                                \
    "Vector kernels of the host optimizer; auto: the widest the CPU supports.")                                 \
  X(KARMA_MPI, kBool, "1", "",                                                                                  \
    "libkarma_mpi.so: phase MPI_Allreduce/MPI_Iallreduce on a communication thread; 0: pass every MPI call "    \
    "through.")                                                                                                 \
  X(KARMA_MPI_COST, kString, "", "",                                                                            \
    "Allreduce cost model ALPHA_US,GBPS (start-up microseconds, GB/s) for merging; empty: measured at "         \
    "MPI_Init.")                                                                                                \
  X(KARMA_MPI_TIMEOUT, kInt, "300", "",                                                                         \
    "Seconds an allreduce of the shim may take before the job is aborted (a rank died or hangs); 0: never.")    \
  X(KARMA_MPI_TIMELINE, kString, "", "",                                                                        \
    "File for each rank's allreduce timeline (JSON, written at MPI_Finalize); %r becomes the rank; empty: "     \
    "none.")                                                                                                    \
  X(KARMA_MPI_PREFETCH, kBool, "1", "",                                                                         \
    "Move managed buffers the shim reads or writes on the host there first, and parameters back to the "        \
    "device after a host update (whole 64 KiB pages, CUDA prefetch).")    \
  X(KARMA_PLAN_CACHE, kString, "", "",                                                                          \
    "Directory of the plan cache (plans keyed by a fingerprint of trace, GPU profile, capacity and solver "     \
    "settings); empty: $XDG_CACHE_HOME/karma/plans (~/.cache/karma/plans); off: no cache.")

namespace karma {

enum class EnvType { kCapacity, kBytes, kEnum, kPath, kString, kBool, kInt };

enum class EnvVar {
#define KARMA_ENV_ENUM(name, type, def, choices, help) name,
  KARMA_ENV_TABLE(KARMA_ENV_ENUM)
#undef KARMA_ENV_ENUM
      kCount
};

}  // namespace karma
