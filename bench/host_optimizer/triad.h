// STREAM's triad, a[i] = b[i] + s * c[i] over doubles, on the host optimizer's thread pool.
#pragma once

#include <cstddef>

#include "mpi_shim/host_optimizer/thread_pool.h"

namespace karma::bench {

// Each worker takes one contiguous share (a multiple of 8 elements), as STREAM's OpenMP loop does.
// streaming: non-temporal stores, so a[] is written without first being read into the cache (the traffic is
// then the 24 bytes per element that STREAM counts; with ordinary stores it is 32), and software prefetch of
// b[] and c[] as far ahead as the optimizer kernels prefetch.
void Triad(hostopt::ThreadPool& pool, double* a, const double* b, const double* c, size_t n, double s,
           bool streaming);

// "stream512" or "stream128": the width of the streaming stores this CPU gets.
const char* TriadStreamingName();

// Writes x[i] = value with the same partition as Triad, so pages are first touched by the worker using them.
void FillParallel(hostopt::ThreadPool& pool, double* x, size_t n, double value);

}  // namespace karma::bench
