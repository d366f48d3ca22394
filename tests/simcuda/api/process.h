// The process-wide simulated device shared by libcudart.so.13, libcuda.so.1 and libcublas.so.13 (libsimcuda.so).
#pragma once

#include "device/device.h"

namespace simcuda {

// The device, created from the SIMCUDA_* variables on first use; its statistics go to SIMCUDA_STATS at exit.
// Null only when the device's address range cannot be reserved (the reason is printed once).
Device* Global();

// Prints "simcuda: <message>" to stderr once per distinct message.
void WarnOnce(const char* message);

}  // namespace simcuda

// Called by the generated stubs of every exported CUDA function simcuda does not implement: says so once per
// function and returns `code` (the library's "not supported" status).
extern "C" int simcuda_unimplemented(const char* name, int code);
