// Matching an iteration's allocations to the recorded ones by their order.
#include "runtime/replay/iteration_allocations.h"

namespace karma::rt {

void IterationAllocations::Track(const ReplayProgram& p, uint64_t iteration) {
  if (iteration == iteration_) return;
  iteration_ = iteration;
  base_.assign(p.alloc_size.size(), 0);
  freed_.assign(p.alloc_size.size(), false);
  // An untrusted iteration counts no allocation: every ordinal stays unknown.
  ordinal_ = iteration == untrusted_ ? static_cast<uint32_t>(base_.size()) : 0;
}

void IterationAllocations::Add(const ReplayProgram& p, uint64_t addr, uint64_t size) {
  const uint32_t k = ordinal_++;
  if (k >= base_.size()) return;
  if (p.alloc_size[k] != size) {
    // Not the allocation the recording saw here: none of this iteration's later ones can be trusted either.
    base_.assign(base_.size(), 0);
    ordinal_ = static_cast<uint32_t>(base_.size());
    return;
  }
  base_[k] = addr;
}

void IterationAllocations::Freed(uint64_t addr) {
  for (size_t k = 0; k < base_.size(); ++k) {
    if (base_[k] == addr) freed_[k] = true;
  }
}

}  // namespace karma::rt
