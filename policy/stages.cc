// Grouping a simulated schedule into the paper's stages and printing them.
#include "policy/stages.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "policy/planning_model.h"

namespace karma::policy {

std::vector<Block> DisplayBlocks(const SimInput& in, const Plan& plan, int count) {
  if (!plan.blocks.empty()) return plan.blocks;
  const PlanningModel m = BuildPlanningModel(in);
  std::vector<uint32_t> starts;
  std::vector<uint32_t> forward_layers;
  for (const Layer& l : m.layers) {
    if (l.phase == trace::Phase::kForward) forward_layers.push_back(l.first);
  }
  if (forward_layers.empty()) return {};
  const size_t n = forward_layers.size(), parts = std::min<size_t>(static_cast<size_t>(std::max(count, 1)), n);
  for (size_t i = 0; i < parts; ++i) starts.push_back(forward_layers[i * n / parts]);
  std::vector<Block> blocks;
  for (size_t i = 0; i < starts.size(); ++i) {
    const uint32_t end = i + 1 < starts.size() ? starts[i + 1] - 1 : m.forward_end - 1;
    blocks.push_back({starts[i], end, BlockMode::kKeep});
  }
  return blocks;
}

std::vector<int> BufferBlocks(const SimInput& in, const std::vector<Block>& blocks) {
  std::vector<int> owner(in.it->buffers.size(), -1);
  for (const trace::Op& op : in.it->ops) {
    if (op.phase != trace::Phase::kForward) continue;
    auto it = std::upper_bound(blocks.begin(), blocks.end(), op.id,
                               [](uint32_t o, const Block& b) { return o < b.first_op; });
    if (it == blocks.begin()) continue;
    const int blk = static_cast<int>(it - blocks.begin()) - 1;
    for (trace::BufferId b : in.access.ops[op.id].writes) owner[b] = blk;
  }
  return owner;
}

std::string Stage::Label() const {
  const int n = block + 1;
  switch (kind) {
    case kForward: return fmt::format("F{}", n);
    case kBackward: return fmt::format("B{}", n);
    case kRecompute: return fmt::format("R{}", n);
    case kUpdate: return "U";
  }
  return "?";
}

std::vector<Stage> BuildStages(const SimInput& in, const Plan& plan, const SimResult& sim) {
  const trace::Iteration& it = *in.it;
  const std::vector<Block> blocks = DisplayBlocks(in, plan);
  const std::vector<int> owner = BufferBlocks(in, blocks);
  // Where each block's saved data is first needed after the forward pass: its backward stage starts there.
  std::vector<std::pair<uint32_t, int>> backward_start;  // (op, block), ascending by op
  {
    std::vector<uint32_t> first(blocks.size(), trace::kNone);
    uint32_t forward_end = 0;
    for (const trace::Op& op : it.ops) {
      if (op.phase == trace::Phase::kForward) forward_end = op.id + 1;
    }
    for (const trace::Op& op : it.ops) {
      if (op.id < forward_end || op.phase == trace::Phase::kOptimizer) continue;
      for (trace::BufferId b : in.access.ops[op.id].reads) {
        if (owner[b] >= 0) first[static_cast<size_t>(owner[b])] = std::min(first[static_cast<size_t>(owner[b])], op.id);
      }
    }
    for (size_t i = 0; i < first.size(); ++i) {
      if (first[i] != trace::kNone) backward_start.push_back({first[i], static_cast<int>(i)});
    }
    std::sort(backward_start.begin(), backward_start.end());
  }
  auto forward_block = [&](uint32_t op) {
    auto b = std::upper_bound(blocks.begin(), blocks.end(), op,
                              [](uint32_t o, const Block& x) { return o < x.first_op; });
    return b == blocks.begin() ? 0 : static_cast<int>(b - blocks.begin()) - 1;
  };
  auto backward_block = [&](uint32_t op) {
    int blk = blocks.empty() ? 0 : static_cast<int>(blocks.size()) - 1;
    for (const auto& [start, b] : backward_start) {
      if (start <= op) blk = b;
    }
    return blk;
  };
  std::vector<Stage> stages;
  double started = 0;
  for (const SimEvent& e : sim.events) {
    if (e.kind == SimEvent::kComputeStart) {
      started = e.t;
      continue;
    }
    if (e.kind != SimEvent::kComputeEnd || e.index >= sim.sequence.size()) continue;
    const ComputeItem& c = sim.sequence[e.index];
    Stage s;
    if (c.action != trace::kNone) {
      // One recompute is one stage, named by the plan's block or by where the last op it re-runs lies.
      const Action& a = plan.actions[c.action];
      s.kind = Stage::kRecompute;
      s.block = a.block >= 0 ? a.block : forward_block(a.ops.back());
    } else if (it.ops[c.op].phase == trace::Phase::kForward) {
      s.kind = Stage::kForward;
      s.block = forward_block(c.op);
    } else if (it.ops[c.op].phase == trace::Phase::kOptimizer) {
      s.kind = Stage::kUpdate;
    } else {
      s.kind = Stage::kBackward;
      s.block = backward_block(c.op);
    }
    if (stages.empty() || stages.back().kind != s.kind || stages.back().block != s.block) {
      s.start_s = started;
      stages.push_back(s);
    }
    stages.back().end_s = e.t;
    stages.back().compute_s += e.t - started;
  }
  // Each copy joins the stage whose compute is running (or next to run) when it starts.
  std::vector<std::set<std::string>> copies(stages.size());
  for (const SimEvent& e : sim.events) {
    if (e.kind != SimEvent::kCopyStart || stages.empty()) continue;
    const Action& a = plan.actions[e.index];
    const int blk = a.block >= 0 ? a.block : owner[a.buffer];
    // Data no forward block produces (weights, gradients, optimizer state) moves as P.
    const char* dir = a.kind == ActionKind::kSwapIn ? "in" : "out";
    const std::string name = blk < 0 ? fmt::format("P{}", dir) : fmt::format("S{}{}", blk + 1, dir);
    size_t k = 0;
    while (k + 1 < stages.size() && stages[k].end_s <= e.t) ++k;
    copies[k].insert(name);
  }
  for (size_t k = 0; k < stages.size(); ++k) {
    std::vector<std::string> v(copies[k].begin(), copies[k].end());
    // Blocks in numeric order (persistent data last), outs before ins.
    auto rank = [](const std::string& x) { return x[0] == 'P' ? 1 << 30 : std::atoi(x.c_str() + 1); };
    std::sort(v.begin(), v.end(), [&](const std::string& x, const std::string& y) {
      return rank(x) != rank(y) ? rank(x) < rank(y) : x > y;
    });
    stages[k].copies = std::move(v);
  }
  return stages;
}

std::string StageNotation(const std::vector<Stage>& stages, size_t max_stages) {
  auto one = [](const Stage& s) {
    std::string t = s.Label();
    for (const std::string& c : s.copies) t += "||" + c;
    return t;
  };
  std::string out;
  const size_t n = stages.size();
  for (size_t i = 0; i < n; ++i) {
    if (n > max_stages && i == max_stages / 2) {
      out += " -> ...";  // the middle, elided
      i = n - max_stages / 2;
    }
    if (!out.empty()) out += " -> ";
    out += one(stages[i]);
  }
  return out;
}

}  // namespace karma::policy
