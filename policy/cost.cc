// Roofline op time.
#include "policy/cost.h"

#include <algorithm>

namespace karma::policy {

double OpSeconds(const trace::Op& op, const HwProfile& hw) {
  if (op.duration_ns > 0) return static_cast<double>(op.duration_ns) * 1e-9;
  return std::max(static_cast<double>(op.flops) / hw.flops_per_s, static_cast<double>(op.bytes) / hw.memory_bw);
}

}  // namespace karma::policy
