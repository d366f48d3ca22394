// Driver-entry-point lookup rules.
#include "interpose/lookup.h"

#include <cstring>

namespace karma::interpose {

StreamFlavor RequestedFlavor(uint64_t flags) {
  return (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 ? StreamFlavor::kPerThreadStream
                                                                      : StreamFlavor::kLegacyStream;
}

HookId ChooseLookupHook(std::span<const HookInfo> hooks, const char* symbol, int version, StreamFlavor requested) {
  if (symbol == nullptr) return HookId::kCount;
  for (const HookInfo& h : hooks) {
    const LookupRule& r = h.lookup;
    if (r.name == nullptr || std::strcmp(r.name, symbol) != 0) continue;
    if (version < r.min_version || (r.end_version != 0 && version >= r.end_version)) continue;
    if (r.flavor != StreamFlavor::kAnyStream && r.flavor != requested) continue;
    return h.id;
  }
  return HookId::kCount;
}

}  // namespace karma::interpose
