// A simulated schedule as the paper's stages: block computations with the transfers running beside them.
#pragma once

#include <string>
#include <vector>

#include "policy/plan.h"
#include "policy/simulator.h"

namespace karma::policy {

// The plan's blocks, or (for strategies without blocks) the forward pass split evenly into `count` blocks
// at layer starts, so that every plan can be read in the same notation.
std::vector<Block> DisplayBlocks(const SimInput& in, const Plan& plan, int count = 8);
// Per buffer: the display block whose forward ops last write it (-1: none).
std::vector<int> BufferBlocks(const SimInput& in, const std::vector<Block>& blocks);

struct Stage {
  enum Kind { kForward, kBackward, kRecompute, kUpdate };
  Kind kind = kForward;
  int block = -1;                    // 0-based; printed 1-based
  double start_s = 0, end_s = 0;     // its compute, start of the first op to end of the last
  double compute_s = 0;              // busy time inside
  // "S2out", "S5in": transfers of those blocks' data that start during the stage; "Pin", "Pout": of persistent
  // data (weights, gradients, optimizer state).
  std::vector<std::string> copies;
  std::string Label() const;         // F3, B3, R3, U
};

// Consecutive compute items with one label form a stage (forward ops by block, backward ops by the block whose
// saved data they have started to consume, recomputes by block, optimizer ops); each copy joins the stage
// during which it starts. Needs a simulation with events.
std::vector<Stage> BuildStages(const SimInput& in, const Plan& plan, const SimResult& sim);
// "F1 -> F2||S1out -> ... -> B6||S3in -> R5 -> ...": at most max_stages stages, "..." in the middle beyond.
std::string StageNotation(const std::vector<Stage>& stages, size_t max_stages = 80);

}  // namespace karma::policy
