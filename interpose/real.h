// Finding the real CUDA functions behind the hooks, the per-hook real-function slots, and the re-entry guard.
#pragma once

#include "interpose/hooks.h"

namespace karma::interpose {

// The next definition after libkarma.so (RTLD_NEXT), else the one in an already loaded library of that
// family (found by soname: libraries opened with RTLD_LOCAL, e.g. by Python extension modules, are invisible
// to RTLD_NEXT); nullptr when neither has it.
void* ResolveReal(rt::CudaLib lib, const char* name);
// ResolveReal, else, for the CUDA runtime and driver, loads the library (privately) and looks there: for the
// functions the session calls itself.
void* ResolveOrLoad(rt::CudaLib lib, const char* name);

// A hook's real function: resolved on first use, or set by a driver-entry-point lookup that handed out the
// hook's wrapper in its place. One atomic load on the hot path.
void* RealOf(HookId id);
void SetReal(HookId id, void* fn);
template <typename Fn>
Fn Real(HookId id) {
  return reinterpret_cast<Fn>(RealOf(id));
}

// What a wrapper returns when its real function exists nowhere (the application called a symbol whose library
// is not loaded): "not initialized" in each library's error space.
int MissingError(rt::CudaLib lib);

// Calls the hooks make while a hook is active on this thread (a library's internal launches, the session's own
// use of hooked functions) go straight to the real functions.
bool InHook();
class HookScope {
 public:
  HookScope();
  ~HookScope();
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;
};

}  // namespace karma::interpose
