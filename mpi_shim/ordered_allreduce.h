// An allreduce whose result does not depend on the algorithm: the reduction is done in rank order.
#pragma once

#include <cstddef>
#include <vector>

#include "mpi_shim/mpi_api.h"

namespace karma::dp {

// Buffers reused from one reduction to the next (one per communication thread).
struct ReduceScratch {
  std::vector<char> slices;
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
};

// Reduces `count` elements of `type` (contiguous, `elem_size` bytes each) in `buf`, in place, over `comm`:
// every rank ends with ((x_0 op x_1) op x_2) ... op x_{size-1}, left to right in rank order, so the bits are
// the same on every rank, in every run, and equal to a single process summing the ranks' contributions in that
// order (MPI allows any association for a predefined op; Open MPI's own algorithms associate differently by
// size and rank count). Each rank owns one contiguous slice: an all-to-all hands the owner every rank's copy
// of its slice, it folds them in rank order with MPI_Reduce_local (non-commutative user ops included), and an
// all-gather returns the slices. Per rank that moves 2 (size-1)/size of the buffer, as a ring does, in two
// collective steps. Returns an MPI error code.
int OrderedAllreduce(const MpiApi& api, MPI_Comm comm, int rank, int size, void* buf, int count, MPI_Datatype type,
                     size_t elem_size, MPI_Op op, ReduceScratch* scratch);

}  // namespace karma::dp
