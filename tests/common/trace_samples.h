// Iterations for tests: a small hand-written MLP step and random valid iterations.
#pragma once

#include <random>
#include <string>

#include "ground/trace/model.h"

namespace karma::testing {

// Adds a buffer and returns its id.
inline trace::BufferId AddBuffer(trace::Iteration& it, uint64_t bytes, trace::BufferKind kind) {
  trace::Buffer b;
  b.id = static_cast<trace::BufferId>(it.buffers.size());
  b.bytes = bytes;
  b.kind = kind;
  b.dtype = "float32";
  it.buffers.push_back(b);
  return b.id;
}

inline trace::OpId AddOp(trace::Iteration& it, const std::string& name, trace::Phase phase,
                         std::vector<trace::BufferId> reads, std::vector<trace::BufferId> writes,
                         uint64_t flops = 1000, uint64_t bytes = 4000) {
  trace::Op op;
  op.id = static_cast<trace::OpId>(it.ops.size());
  op.name = name;
  op.phase = phase;
  op.reads = std::move(reads);
  op.writes = std::move(writes);
  op.flops = flops;
  op.bytes = bytes;
  it.ops.push_back(op);
  return op.id;
}

// x -> linear(w1) -> a1 -> relu -> a2 -> linear(w2) -> y, loss, backward, SGD.
inline trace::Iteration TinyMlp() {
  using trace::BufferKind;
  using trace::Phase;
  trace::Iteration it;
  it.model = "tiny-mlp";
  it.batch = 4;
  it.source = "hand-written test iteration";
  const auto w1 = AddBuffer(it, 400, BufferKind::kParam);
  const auto w2 = AddBuffer(it, 200, BufferKind::kParam);
  const auto x = AddBuffer(it, 100, BufferKind::kInput);
  const auto a1 = AddBuffer(it, 1000, BufferKind::kActivation);
  const auto a2 = AddBuffer(it, 1000, BufferKind::kActivation);
  const auto y = AddBuffer(it, 50, BufferKind::kActivation);
  const auto gy = AddBuffer(it, 50, BufferKind::kTemp);
  const auto ga2 = AddBuffer(it, 1000, BufferKind::kTemp);
  const auto ga1 = AddBuffer(it, 1000, BufferKind::kTemp);
  const auto gw1 = AddBuffer(it, 400, BufferKind::kGrad);
  const auto gw2 = AddBuffer(it, 200, BufferKind::kGrad);
  AddOp(it, "linear", Phase::kForward, {x, w1}, {a1});
  AddOp(it, "relu", Phase::kForward, {a1}, {a2});
  AddOp(it, "linear", Phase::kForward, {a2, w2}, {y});
  AddOp(it, "loss_backward", Phase::kBackward, {y}, {gy});
  AddOp(it, "linear_backward", Phase::kBackward, {gy, a2, w2}, {ga2, gw2});
  AddOp(it, "relu_backward", Phase::kBackward, {ga2, a1}, {ga1});
  AddOp(it, "linear_backward", Phase::kBackward, {ga1, x}, {gw1});
  AddOp(it, "sgd_", Phase::kOptimizer, {w1, gw1}, {w1});
  AddOp(it, "sgd_", Phase::kOptimizer, {w2, gw2}, {w2});
  return it;
}

// A random valid iteration with every field exercised (sites, addresses, touches, events).
inline trace::Iteration RandomIteration(uint32_t seed, int max_buffers = 40, int max_ops = 60) {
  std::mt19937 rng(seed);
  auto uniform = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  trace::Iteration it;
  it.model = "random-" + std::to_string(seed);
  it.source = seed % 2 ? "" : "generated";
  it.batch = static_cast<uint32_t>(uniform(0, 512));
  const int nbuf = static_cast<int>(uniform(0, max_buffers));
  for (int i = 0; i < nbuf; ++i) {
    auto id = AddBuffer(it, uniform(0, 1ull << 34), static_cast<trace::BufferKind>(uniform(0, trace::kBufferKindCount - 1)));
    if (uniform(0, 1)) it.buffers[id].site = "frame" + std::to_string(uniform(0, 99)) + " <- main";
    if (uniform(0, 1)) it.buffers[id].address = uniform(1, 1ull << 47);
    if (uniform(0, 3) == 0) it.buffers[id].dtype = "";
  }
  const int nops = nbuf ? static_cast<int>(uniform(0, max_ops)) : 0;
  for (int i = 0; i < nops; ++i) {
    std::vector<trace::BufferId> r, w, t;
    for (uint64_t k = uniform(0, 3); k > 0; --k) r.push_back(static_cast<trace::BufferId>(uniform(0, nbuf - 1)));
    for (uint64_t k = uniform(0, 2); k > 0; --k) w.push_back(static_cast<trace::BufferId>(uniform(0, nbuf - 1)));
    for (uint64_t k = uniform(0, 4) == 0 ? 1 : 0; k > 0; --k) t.push_back(static_cast<trace::BufferId>(uniform(0, nbuf - 1)));
    auto id = AddOp(it, "op" + std::to_string(uniform(0, 20)), static_cast<trace::Phase>(uniform(0, trace::kPhaseCount - 1)),
                    r, w, uniform(0, 1ull << 40), uniform(0, 1ull << 32));
    it.ops[id].touches = t;
    it.ops[id].kind = static_cast<trace::OpKind>(uniform(0, trace::kOpKindCount - 1));
    it.ops[id].stream = static_cast<uint32_t>(uniform(0, 3));
    if (uniform(0, 1)) it.ops[id].duration_ns = uniform(1, 1'000'000);
  }
  uint32_t at = 0;
  for (uint64_t k = nbuf ? uniform(0, 10) : 0; k > 0; --k) {
    at = static_cast<uint32_t>(uniform(at, nops));
    trace::Event e;
    e.kind = static_cast<trace::EventKind>(uniform(0, trace::kEventKindCount - 1));
    e.before_op = at;
    const bool has_buffer = e.kind == trace::EventKind::kAlloc || e.kind == trace::EventKind::kFreeRequested ||
                            e.kind == trace::EventKind::kFreeCompleted;
    e.buffer = has_buffer ? static_cast<trace::BufferId>(uniform(0, nbuf - 1)) : trace::kNone;
    e.time_ns = uniform(0, 1) ? uniform(1, 1ull << 40) : 0;
    it.events.push_back(e);
  }
  return it;
}

}  // namespace karma::testing
