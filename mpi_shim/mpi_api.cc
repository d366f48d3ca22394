// Run-time lookup of the PMPI functions and Open MPI's predefined handles.
#include "mpi_shim/mpi_api.h"

#include <dlfcn.h>

namespace karma::dp {
namespace {

// Functions: the next definition after this library (ours come first in the search order).
void* FindFunction(const char* name) {
  if (void* p = dlsym(RTLD_NEXT, name)) return p;
  return dlsym(RTLD_DEFAULT, name);
}

// Objects: the first definition in the search order. A program that uses MPI_COMM_WORLD has a copy relocation
// of ompi_mpi_comm_world, and libmpi itself uses that copy, not the one in libmpi (which RTLD_NEXT would find).
void* FindObject(const char* name) { return dlsym(RTLD_DEFAULT, name); }

template <typename T>
bool Load(T* slot, const char* name, const char** missing, void* (*find)(const char*)) {
  *slot = reinterpret_cast<T>(find(name));
  if (*slot == nullptr && *missing == nullptr) *missing = name;
  return *slot != nullptr;
}

}  // namespace

bool LoadMpiApi(MpiApi* api, const char** missing) {
  *missing = nullptr;
  bool ok = true;
#define KARMA_MPI_API_LOAD(name) ok &= Load(&api->name, "PMPI_" #name, missing, FindFunction);
  KARMA_MPI_API_TABLE(KARMA_MPI_API_LOAD)
#undef KARMA_MPI_API_LOAD
  ok &= Load(&api->comm_world, "ompi_mpi_comm_world", missing, FindObject);
  ok &= Load(&api->type_float, "ompi_mpi_float", missing, FindObject);
  ok &= Load(&api->type_double, "ompi_mpi_double", missing, FindObject);
  ok &= Load(&api->op_sum, "ompi_mpi_op_sum", missing, FindObject);
  ok &= Load(&api->op_max, "ompi_mpi_op_max", missing, FindObject);
  ok &= Load(&api->request_null, "ompi_request_null", missing, FindObject);
  ok &= Load(&api->errors_return, "ompi_mpi_errors_return", missing, FindObject);
  return ok;
}

}  // namespace karma::dp
