// Launching a recorded kernel again with its recorded arguments: what a recompute issues.
#pragma once

#include <functional>
#include <memory>

#include "runtime/observe/ops.h"
#include "runtime/observe/param_scan.h"

namespace karma::rt {

// Copies the argument bytes of a plain runtime or driver launch (parameters by pointer, a known layout); null
// when the launch cannot be repeated that way.
Relaunch MakeKernelRelaunch(const OpDesc& d, const ParamLayout& layout);

}  // namespace karma::rt
