// Shared by the parts of the public C API: the optimizer handle behind karma_optimizer* and status reporting.
#pragma once

#include <exception>
#include <memory>
#include <new>
#include <string>

#include "include/karma/karma.h"
#include "mpi_shim/host_optimizer/host_optimizer.h"
#include "ground/common/status.h"

struct karma_optimizer {
  std::unique_ptr<karma::hostopt::HostOptimizer> impl;
};

namespace karma::capi {

// OK, or the status code with its message kept for karma_last_error() on this thread.
karma_status Report(const Status& s);

// Nothing may unwind into C: allocation failures and anything unforeseen become a status.
template <typename Fn>
karma_status Guard(Fn&& fn) {
  try {
    return Report(fn());
  } catch (const std::bad_alloc&) {
    return Report(Status(Code::kResourceExhausted, "out of memory"));
  } catch (const std::exception& e) {
    return Report(Internal(std::string("unexpected: ") + e.what()));
  } catch (...) {
    return Report(Internal("unexpected exception"));
  }
}

inline Status NullArgument(const char* what) { return InvalidArgument(std::string(what) + " is NULL"); }

}  // namespace karma::capi
