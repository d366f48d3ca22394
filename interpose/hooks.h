// What the hook table generates for C++: hook ids and names, the real-function types, the handler declarations,
// and the lookup rules of the driver entry points.
#pragma once

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <span>

#include "interpose/hook_table.h"
#include "runtime/base/cuda_api.h"

// cuda.h renames cuGetProcAddress and cuMemcpyBatchAsync to their _v2; the table names both ABIs explicitly.
#undef cuGetProcAddress
#undef cuMemcpyBatchAsync

// (a, b) -> a, b; () -> nothing.
#define KARMA_UNPAREN(...) __VA_ARGS__
// PREPEND(x, (a, b)) -> (x, a, b); PREPEND(x, ()) -> (x).
#define KARMA_PREPEND(first, list) KARMA_PREPEND_I(first, KARMA_UNPAREN list)
#define KARMA_PREPEND_I(first, ...) KARMA_PREPEND_II(first, __VA_ARGS__)
#define KARMA_PREPEND_II(first, ...) (first __VA_OPT__(, ) __VA_ARGS__)

namespace karma::interpose {

enum class StreamFlavor : uint8_t { kAnyStream, kLegacyStream, kPerThreadStream };

// When a driver-entry-point lookup may return a hook's wrapper (see KARMA_LOOKUP in hook_table.h).
struct LookupRule {
  const char* name = nullptr;  // nullptr: never handed out by a lookup
  int min_version = 0;
  int end_version = 0;         // 0: no end
  StreamFlavor flavor = StreamFlavor::kAnyStream;
};
#define KARMA_NO_LOOKUP ::karma::interpose::LookupRule{}
#define KARMA_LOOKUP(name, min, end, flavor) \
  ::karma::interpose::LookupRule { name, min, end, ::karma::interpose::StreamFlavor::flavor }

enum class HookId : uint16_t {
#define KARMA_HOOK_ENUM(lib, ret, name, params, args, lookup) name,
  KARMA_HOOK_TABLE(KARMA_HOOK_ENUM)
#undef KARMA_HOOK_ENUM
      kCount
};
inline constexpr size_t kHookCount = static_cast<size_t>(HookId::kCount);

struct HookInfo {
  HookId id;
  const char* name;
  rt::CudaLib lib;
  LookupRule lookup;
};
// Indexed by HookId.
std::span<const HookInfo> Hooks();
inline const HookInfo& InfoOf(HookId id) { return Hooks()[static_cast<size_t>(id)]; }

}  // namespace karma::interpose

namespace karma::hook {

// NAME_fn: the type of the real function; NAME(real, args...): the handler the exported wrapper calls.
#define KARMA_HOOK_DECLARE(lib, ret, name, params, args, lookup) \
  using name##_fn = ret(*) params;                               \
  ret name KARMA_PREPEND(name##_fn real, params);
KARMA_HOOK_TABLE(KARMA_HOOK_DECLARE)
#undef KARMA_HOOK_DECLARE

}  // namespace karma::hook
