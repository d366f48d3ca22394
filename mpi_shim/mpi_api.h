// The MPI functions and predefined handles the shim uses, found at run time, so that libkarma_mpi.so has no
// link-time dependency on libmpi and stays inert in a process that never calls MPI_Init.
#pragma once

#include <mpi.h>

namespace karma::dp {

// X(NAME): every PMPI_NAME the shim calls. The shim calls the profiling entry points only: its own MPI_*
// definitions are what the application reaches.
#define KARMA_MPI_API_TABLE(X) \
  X(Init)                      \
  X(Init_thread)               \
  X(Finalize)                  \
  X(Finalized)                 \
  X(Abort)                     \
  X(Error_string)              \
  X(Comm_rank)                 \
  X(Comm_size)                 \
  X(Comm_dup)                  \
  X(Comm_free)                 \
  X(Comm_test_inter)           \
  X(Comm_set_errhandler)       \
  X(Comm_create_keyval)        \
  X(Comm_free_keyval)          \
  X(Comm_set_attr)             \
  X(Comm_get_attr)             \
  X(Type_size)                 \
  X(Type_get_extent)           \
  X(Allreduce)                 \
  X(Iallreduce)                \
  X(Alltoallv)                 \
  X(Allgatherv)                \
  X(Barrier)                   \
  X(Reduce_local)              \
  X(Grequest_start)            \
  X(Grequest_complete)         \
  X(Status_set_elements)       \
  X(Status_set_cancelled)      \
  X(Wait)                      \
  X(Waitall)                   \
  X(Waitany)                   \
  X(Waitsome)                  \
  X(Test)                      \
  X(Testall)                   \
  X(Testany)                   \
  X(Testsome)

struct MpiApi {
#define KARMA_MPI_API_FIELD(name) decltype(&::PMPI_##name) name = nullptr;
  KARMA_MPI_API_TABLE(KARMA_MPI_API_FIELD)
#undef KARMA_MPI_API_FIELD

  // Open MPI's predefined handles are addresses of objects in libmpi (MPI_COMM_WORLD is
  // &ompi_mpi_comm_world): looked up by name rather than referenced, for the same reason as the functions.
  MPI_Comm comm_world = nullptr;
  MPI_Datatype type_float = nullptr;
  MPI_Datatype type_double = nullptr;
  MPI_Op op_sum = nullptr;
  MPI_Op op_max = nullptr;
  MPI_Request request_null = nullptr;
  MPI_Errhandler errors_return = nullptr;
};

// Fills `api` from the process: the functions after this library in the search order (RTLD_NEXT), else any
// loaded object. False, with the first missing name in *missing, when libmpi is not there or is not Open MPI.
bool LoadMpiApi(MpiApi* api, const char** missing);

}  // namespace karma::dp
