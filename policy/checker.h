// An independent check of a simulated schedule: replays its events and re-derives memory and data validity.
#pragma once

#include "policy/plan.h"
#include "policy/simulator.h"
#include "ground/common/status.h"

namespace karma::policy {

// Replays the events of a feasible simulation (SimOptions::record_events) with its own bookkeeping, which
// shares nothing with the simulator's but the op access sets, and checks that:
//   - every op of the iteration runs once, in order, and every recompute runs where the plan puts it;
//     engines never run two things at once, and durations match the cost model and link bandwidths;
//   - every action starts after the op it is anchored to, and swap-ins (and synchronous swap-outs) finish
//     before the op that waits for them;
//   - device memory (buffers live from allocation to their last use in the schedule, swap-ins from the start
//     of their copy) never exceeds the capacity, and its peak equals what the simulator reports;
//   - every read sees the value the original program order gives it (tracked per buffer as the op that
//     wrote it), through swap-outs, swap-ins and recomputes; no buffer changes while it is copied out;
//   - at the end, every persistent buffer holds its final value in its home (device or host).
Status CheckSchedule(const SimInput& in, const Plan& plan, const SimResult& result);

}  // namespace karma::policy
