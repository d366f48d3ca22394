// The rules by which a driver-entry-point lookup (cuGetProcAddress, cudaGetDriverEntryPoint) hands out a
// hook's wrapper instead of the driver's function.
#pragma once

#include <cstdint>
#include <span>

#include "interpose/hooks.h"

namespace karma::interpose {

// The default-stream flavour a lookup asks for. CU_GET_PROC_ADDRESS_* and cudaEnable* share the bits; with
// neither bit set the caller was not compiled for per-thread default streams (cuda.h's per-thread build adds
// the bit itself), so it gets the legacy flavour.
StreamFlavor RequestedFlavor(uint64_t flags);

// The hook whose wrapper answers a lookup of `symbol` at CUDA `version`, or HookId::kCount to pass the
// driver's answer through: the name must match exactly (a prefix test would also catch cudnn* and cuMemAllocHost),
// the version must select the ABI the wrapper implements, and the stream flavour must be the wrapper's.
HookId ChooseLookupHook(std::span<const HookInfo> hooks, const char* symbol, int version, StreamFlavor requested);

}  // namespace karma::interpose
