// The exported functions of libkarma_mpi.so: the MPI entry points the shim takes over (each hands over to the
// engine, or to the real PMPI function when the engine does not run) and the karma_dp_* C API.
#include <mutex>

#include "include/karma/karma.h"
#include "mpi_shim/engine.h"
#include "mpi_shim/host_optimizer/c_api_internal.h"
#include "ground/common/log.h"

#define KARMA_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using karma::dp::Engine;
using karma::dp::MpiApi;

struct Loaded {
  MpiApi api;
  bool complete = false;
};

// Resolved on first use. Without every function and handle (another MPI library), the shim cannot run but the
// functions that were found still pass through.
const Loaded& Mpi() {
  static const Loaded loaded = [] {
    Loaded l;
    const char* missing = nullptr;
    l.complete = karma::dp::LoadMpiApi(&l.api, &missing);
    if (!l.complete) {
      KARMA_LOG(kWarn, "karma-mpi: {} not found (the shim needs Open MPI's libmpi); passing MPI calls through",
                missing ? missing : "?");
    }
    return l;
  }();
  return loaded;
}

// The real function, or an error code when even that is missing.
#define KARMA_PASS(name, ...) (Mpi().api.name ? Mpi().api.name(__VA_ARGS__) : MPI_ERR_INTERN)

std::mutex g_hooks_mu;
bool g_have_hooks = false;
karma_dp_memory_hooks g_hooks{};

}  // namespace

KARMA_EXPORT int MPI_Init(int* argc, char*** argv) {
  if (!Mpi().complete) return KARMA_PASS(Init, argc, argv);
  const int rc = Engine::Init(Mpi().api, argc, argv, -1, nullptr);
  std::lock_guard lock(g_hooks_mu);
  if (Engine* e = Engine::Active(); e && g_have_hooks) e->SetMemoryHooks(&g_hooks);
  return rc;
}

KARMA_EXPORT int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  if (!Mpi().complete) return KARMA_PASS(Init_thread, argc, argv, required, provided);
  const int rc = Engine::Init(Mpi().api, argc, argv, required, provided);
  std::lock_guard lock(g_hooks_mu);
  if (Engine* e = Engine::Active(); e && g_have_hooks) e->SetMemoryHooks(&g_hooks);
  return rc;
}

KARMA_EXPORT int MPI_Finalize(void) {
  if (Engine* e = Engine::Active()) return e->Finalize();
  return KARMA_PASS(Finalize);
}

KARMA_EXPORT int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                               MPI_Comm comm) {
  if (Engine* e = Engine::Active()) return e->Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  return KARMA_PASS(Allreduce, sendbuf, recvbuf, count, datatype, op, comm);
}

KARMA_EXPORT int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                MPI_Comm comm, MPI_Request* request) {
  if (Engine* e = Engine::Active()) return e->Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  return KARMA_PASS(Iallreduce, sendbuf, recvbuf, count, datatype, op, comm, request);
}

KARMA_EXPORT int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  if (Engine* e = Engine::Active()) return e->Wait(request, status);
  return KARMA_PASS(Wait, request, status);
}

KARMA_EXPORT int MPI_Waitall(int count, MPI_Request array_of_requests[], MPI_Status* array_of_statuses) {
  if (Engine* e = Engine::Active()) return e->Waitall(count, array_of_requests, array_of_statuses);
  return KARMA_PASS(Waitall, count, array_of_requests, array_of_statuses);
}

KARMA_EXPORT int MPI_Waitany(int count, MPI_Request array_of_requests[], int* index, MPI_Status* status) {
  if (Engine* e = Engine::Active()) return e->Waitany(count, array_of_requests, index, status);
  return KARMA_PASS(Waitany, count, array_of_requests, index, status);
}

KARMA_EXPORT int MPI_Waitsome(int incount, MPI_Request array_of_requests[], int* outcount, int array_of_indices[],
                              MPI_Status array_of_statuses[]) {
  if (Engine* e = Engine::Active()) return e->Waitsome(incount, array_of_requests, outcount, array_of_indices, array_of_statuses);
  return KARMA_PASS(Waitsome, incount, array_of_requests, outcount, array_of_indices, array_of_statuses);
}

KARMA_EXPORT int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  if (Engine* e = Engine::Active()) return e->Test(request, flag, status);
  return KARMA_PASS(Test, request, flag, status);
}

KARMA_EXPORT int MPI_Testall(int count, MPI_Request array_of_requests[], int* flag, MPI_Status array_of_statuses[]) {
  if (Engine* e = Engine::Active()) return e->Testall(count, array_of_requests, flag, array_of_statuses);
  return KARMA_PASS(Testall, count, array_of_requests, flag, array_of_statuses);
}

KARMA_EXPORT int MPI_Testany(int count, MPI_Request array_of_requests[], int* index, int* flag, MPI_Status* status) {
  if (Engine* e = Engine::Active()) return e->Testany(count, array_of_requests, index, flag, status);
  return KARMA_PASS(Testany, count, array_of_requests, index, flag, status);
}

KARMA_EXPORT int MPI_Testsome(int incount, MPI_Request array_of_requests[], int* outcount, int array_of_indices[],
                              MPI_Status array_of_statuses[]) {
  if (Engine* e = Engine::Active()) return e->Testsome(incount, array_of_requests, outcount, array_of_indices, array_of_statuses);
  return KARMA_PASS(Testsome, incount, array_of_requests, outcount, array_of_indices, array_of_statuses);
}

KARMA_EXPORT karma_status karma_dp_attach_optimizer(karma_optimizer* opt) {
  return karma::capi::Guard([&]() -> karma::Status {
    if (!opt) return karma::capi::NullArgument("optimizer");
    return Engine::AttachOptimizer(opt->impl.get());
  });
}

KARMA_EXPORT karma_status karma_dp_detach_optimizer(karma_optimizer* opt) {
  return karma::capi::Guard([&]() -> karma::Status {
    if (!opt) return karma::capi::NullArgument("optimizer");
    return Engine::DetachOptimizer(opt->impl.get());
  });
}

KARMA_EXPORT karma_status karma_dp_set_memory_hooks(const karma_dp_memory_hooks* hooks) {
  return karma::capi::Guard([&]() -> karma::Status {
    std::lock_guard lock(g_hooks_mu);
    g_have_hooks = hooks != nullptr;
    g_hooks = hooks ? *hooks : karma_dp_memory_hooks{};
    if (Engine* e = Engine::Active()) e->SetMemoryHooks(hooks);
    return karma::Status::Ok();
  });
}

KARMA_EXPORT karma_status karma_dp_get_stats(karma_dp_stats* out) {
  return karma::capi::Guard([&]() -> karma::Status {
    if (!out) return karma::capi::NullArgument("out");
    *out = karma_dp_stats{};
    if (Engine* e = Engine::Last()) *out = e->Stats();
    return karma::Status::Ok();
  });
}
