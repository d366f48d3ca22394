// The roofline cost of an op on a hardware profile (a measured duration wins where the trace has one).
#pragma once

#include "policy/hw_profile.h"
#include "ground/trace/model.h"

namespace karma::policy {

// Seconds op takes: its measured duration if known, else max(flops / F, bytes / B).
double OpSeconds(const trace::Op& op, const HwProfile& hw);
// Seconds to move `bytes` over a copy engine of `bytes_per_s`.
inline double CopySeconds(uint64_t bytes, double bytes_per_s) { return static_cast<double>(bytes) / bytes_per_s; }

}  // namespace karma::policy
