// Turns a strategy's decisions (evict this buffer here, restore it there, recompute these ops) into a Plan.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "policy/plan.h"
#include "policy/simulator.h"

namespace karma::policy {

// Every use of every buffer in a compute sequence, grouped by buffer in sequence order (flat storage: planning
// builds these for every candidate).
struct BufferUse {
  uint32_t item;    // index into the compute sequence
  bool pure_write;  // overwrites the buffer without reading it
  bool writes;
};
class SequenceUses {
 public:
  SequenceUses(const SimInput& in, const std::vector<ComputeItem>& seq);
  std::span<const BufferUse> of(trace::BufferId b) const {
    return {uses_.data() + offset_[b], uses_.data() + offset_[b + 1]};
  }

 private:
  std::vector<uint32_t> offset_;
  std::vector<BufferUse> uses_;
};
// Whether b's value after compute item k is read again (or b is persistent: kept across iterations).
bool LiveAfter(const SimInput& in, const SequenceUses& uses, trace::BufferId b, uint32_t k);

// Device bytes allocated while each compute item runs when every copy were instantaneous at its anchor
// (swap-outs and discards free right after their op, swap-ins allocate right after theirs): the memory
// a plan needs if the copy engines kept up. Indexed like ComputeSequence(plan).
std::vector<uint64_t> StaticMemory(const SimInput& in, const Plan& plan);

// A swap-in anchor the builder chooses itself: as early as capacity allows, first-in first-out.
inline constexpr int32_t kSchedulePrefetch = INT32_MIN;
// No separate write-back: the eviction itself copies out (and frees when the copy is done).
inline constexpr int32_t kWritebackAtEviction = INT32_MIN + 1;

class PlanBuilder {
 public:
  PlanBuilder(const SimInput& in, std::string strategy);

  // Persistent buffers kept off the device between iterations: those the input homes on the host
  // (AccessModel::host_home), which every plan keeps there, and those added. Finish() brings each in before its
  // first use (unless that use overwrites it) and sends it back (or drops it, when the host copy is current or its
  // value is dead) after its last use.
  void AddHostResident(trace::BufferId b) { host_home_[b] = true; }
  const std::vector<bool>& host_resident() const { return host_home_; }

  // Re-runs `ops` (forward ops, in order) right before op `before`.
  void Recompute(std::vector<trace::OpId> ops, uint32_t before, int block = -1);

  // Takes `b` off the device after op `after` and brings it back for its next use, by a swap-in anchored at
  // `prefetch_after` (kSchedulePrefetch: chosen by Finish) that op `wait_before` (kNone: the next user) waits
  // for — unless `recomputed`, in which case a recompute action rebuilds it and it is only dropped here.
  // Data goes back to the host only when the host copy is not current: by a swap-out at the eviction, or,
  // with `writeback_after`, by a copy that starts after that op while the device copy stays until the
  // eviction drops it. `sync_before` makes that op wait for the write-back. `need` is informative.
  struct Eviction {
    trace::BufferId buffer = trace::kNone;
    int32_t after = kAtStart;
    uint32_t need = trace::kNone;
    bool recomputed = false;
    int32_t prefetch_after = kSchedulePrefetch;
    int32_t writeback_after = kWritebackAtEviction;
    uint32_t sync_before = trace::kNone;
    uint32_t wait_before = trace::kNone;
    int block = -1;
    bool written_back = false;  // a paged op at `after` sent it home: nothing left to copy out or free
  };
  void Evict(const Eviction& e);

  // The plan: evictions become swap-outs or discards, restores become swap-ins with scheduled anchors, and
  // the actions are ordered by anchor.
  Plan Finish(uint64_t capacity) const;
  // The same decisions with every swap-in anchored right before its need: memory per compute item, the
  // least a plan with these decisions can need.
  std::vector<uint64_t> LatestRestoreMemory() const;

  // Plans over managed memory (Plan::managed_memory): ops larger than the capacity run paged. Their reads are
  // then prefetched only as far as the room beside everything else allows, in the order the op reads them;
  // the rest is faulted in. The live operands such an op sends home (SettlePagedOp) come back before their
  // next use.
  void set_managed_memory(bool managed) { managed_ = managed; }
  bool managed_memory() const { return managed_; }

  // (buffer, paged op) for every live operand a paged op of the sequence sends home (managed memory only).
  std::vector<std::pair<trace::BufferId, trace::OpId>> PagedSendsHome(const std::vector<ComputeItem>& seq) const;

  const SimInput& input() const { return in_; }
  // The compute sequence the recomputes so far give.
  std::vector<ComputeItem> Sequence() const;
  const std::vector<Eviction>& evictions() const { return evictions_; }
  const std::vector<Action>& recomputes() const { return recomputes_; }

 private:
  Plan Assemble(bool schedule, uint64_t capacity) const;

  const SimInput& in_;
  std::string strategy_;
  std::vector<bool> host_home_;
  std::vector<Action> recomputes_;
  std::vector<Eviction> evictions_;
  bool managed_ = false;
};

// Positions of the iteration's own ops in a compute sequence.
std::vector<uint32_t> OpPositions(const std::vector<ComputeItem>& seq, size_t num_ops);
// The first of the iteration's own ops at or after compute item k (the last op when there is none): the op an
// action after item k anchors to.
uint32_t OwnOpAtOrAfter(const std::vector<ComputeItem>& seq, size_t k);
// The last of the iteration's own ops before compute item k; kNone when there is none.
uint32_t OwnOpBefore(const std::vector<ComputeItem>& seq, size_t k);

}  // namespace karma::policy
