// Per-op times of an iteration: measured, recorded counts on the roofline, or formula estimates.
#include "policy/cost_model.h"

#include "policy/cost.h"
#include "policy/layer_cost.h"

namespace karma::policy {

std::vector<double> OpTimes(const trace::Iteration& it, const HwProfile& hw) {
  std::vector<double> t(it.ops.size());
  for (const trace::Op& op : it.ops) {
    if (op.flops == 0 && op.duration_ns == 0) {
      trace::Op estimated = op;
      estimated.flops = EstimateFlops(op, it);
      t[op.id] = OpSeconds(estimated, hw);
    } else {
      t[op.id] = OpSeconds(op, hw);
    }
  }
  return t;
}

double IdealSeconds(const std::vector<double>& op_times) {
  double s = 0;
  for (double t : op_times) s += t;
  return s;
}

double PagingSeconds(const HwProfile& hw, uint64_t fault_bytes, uint64_t evicted_bytes) {
  const uint64_t pages = (fault_bytes + kManagedPageBytes - 1) / kManagedPageBytes;
  return static_cast<double>(pages) * hw.fault_latency_s + static_cast<double>(fault_bytes) / hw.fault_bw +
         static_cast<double>(evicted_bytes) / hw.managed.d2h_bw;
}

}  // namespace karma::policy
