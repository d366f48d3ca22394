// The rank-order allreduce: all-to-all of slices, fold in rank order, all-gather.
#include "mpi_shim/ordered_allreduce.h"

#include <cstring>

namespace karma::dp {

int OrderedAllreduce(const MpiApi& api, MPI_Comm comm, int rank, int size, void* buf, int count, MPI_Datatype type,
                     size_t elem_size, MPI_Op op, ReduceScratch* s) {
  if (size <= 1 || count <= 0) return MPI_SUCCESS;
  const auto n = static_cast<size_t>(size);
  s->send_counts.assign(n, 0);
  s->send_displs.assign(n, 0);
  s->recv_counts.assign(n, 0);
  s->recv_displs.assign(n, 0);
  // Slice r: count / size elements, one more for the first count % size ranks.
  const int base = count / size, extra = count % size;
  int offset = 0;
  for (size_t r = 0; r < n; ++r) {
    s->send_counts[r] = base + (static_cast<int>(r) < extra ? 1 : 0);
    s->send_displs[r] = offset;
    offset += s->send_counts[r];
  }
  const int mine = s->send_counts[static_cast<size_t>(rank)];
  for (size_t r = 0; r < n; ++r) {
    s->recv_counts[r] = mine;
    s->recv_displs[r] = static_cast<int>(r) * mine;
  }
  const size_t slice_bytes = static_cast<size_t>(mine) * elem_size;
  if (s->slices.size() < slice_bytes * n) s->slices.resize(slice_bytes * n);
  char* slices = s->slices.data();

  int rc = api.Alltoallv(buf, s->send_counts.data(), s->send_displs.data(), type, slices, s->recv_counts.data(),
                         s->recv_displs.data(), type, comm);
  if (rc != MPI_SUCCESS) return rc;
  if (mine > 0) {
    // slice[r] = slice[r-1] op slice[r]: Reduce_local(in, inout) computes inout = in op inout.
    for (size_t r = 1; r < n; ++r) {
      rc = api.Reduce_local(slices + (r - 1) * slice_bytes, slices + r * slice_bytes, mine, type, op);
      if (rc != MPI_SUCCESS) return rc;
    }
    std::memcpy(static_cast<char*>(buf) + static_cast<size_t>(s->send_displs[static_cast<size_t>(rank)]) * elem_size,
                slices + (n - 1) * slice_bytes, slice_bytes);
  }
  return api.Allgatherv(MPI_IN_PLACE, 0, type, buf, s->send_counts.data(), s->send_displs.data(), type, comm);
}

}  // namespace karma::dp
