// Phases and buffer kinds of a recorded iteration, inferred from its access pattern where the API did not say.
#pragma once

#include "ground/trace/model.h"

namespace karma::trace {

// A recorder sees kernels and library calls, not layers: every op's phase is unknown and most buffers are
// `other`. Planners need both (only forward ops are re-run; persistent data is kept or sent home differently
// from activations), so they are inferred:
//  - forward: the ops up to the one where the ideal live memory peaks (training keeps what the backward pass
//    needs until the loss; the backward pass frees it);
//  - optimizer: the ops after the last kernel or library call that uses an activation (a buffer allocated inside
//    the iteration or first written in the forward pass): they update weights and their state from the gradients
//    (copies among them, such as the loss read back to the host, stay with them);
//  - backward: everything between.
// Does nothing when any op already has a phase.
void InferPhases(Iteration& it);

// Kinds of persistent buffers (not allocated inside the iteration) of kind `other` (after InferPhases): read in forward and written by the optimizer
// -> param; written in backward and read by the optimizer -> grad; otherwise touched only by the optimizer ->
// state. Other buffers keep their kind.
void InferKinds(Iteration& it);

}  // namespace karma::trace
