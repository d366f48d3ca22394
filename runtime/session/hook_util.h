// Helpers shared by the hook handlers (interpose/handlers_*.cc): the per-thread stream key and the bracket that
// shows an op to the session around its real call.
#pragma once

#include <cstdint>

#include "runtime/session/session.h"

namespace karma::rt {

// In the driver's _ptsz entry points the NULL stream is the calling thread's per-thread stream.
inline StreamKey PerThreadKeyOf(CUstream s) { return s == nullptr ? 0x2 : KeyOf(s); }

// Runs `real` bracketed by the session's view of the op; `ok` is the API's success value.
template <typename Err, typename RealCall>
Err Observed(Session* s, const OpDesc& d, Err ok, RealCall real) {
  OpScope op = s->BeginOp(d);
  const Err e = real();
  op.End(e == ok);
  return e;
}

}  // namespace karma::rt
