// A synthetic training iteration of any length: a linear chain of fully connected + ReLU layers, its backward
// pass and SGD with momentum, for planner benchmarks and tests on graphs far larger than the shared workloads.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "tests/common/trace_samples.h"

namespace karma::testing {

// About `ops` ops (5 per layer: linear, relu; relu and linear backward; the weight's SGD step; plus a loss).
// Widths vary per layer (a fixed seed), so that blocks differ in size and cost; times come from the FLOP
// counts on the roofline.
inline trace::Iteration LinearChain(size_t ops, uint32_t seed = 1) {
  using trace::BufferKind;
  using trace::Phase;
  trace::Iteration it;
  it.model = "linear-chain-" + std::to_string(ops);
  it.source = "tests/common/linear_chain.h (synthetic)";
  const size_t layers = ops > 6 ? (ops - 1) / 5 : 1;
  constexpr uint64_t kBatch = 2048;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint64_t> width_of(2, 8);  // x 256 features
  std::vector<uint64_t> width(layers + 1);
  for (uint64_t& w : width) w = 256 * width_of(rng);
  it.batch = kBatch;
  auto act = [&](size_t l) { return AddBuffer(it, kBatch * width[l] * 4, BufferKind::kActivation); };
  std::vector<trace::BufferId> a(layers + 1), z(layers), w(layers), gw(layers), mom(layers);
  a[0] = AddBuffer(it, kBatch * width[0] * 4, BufferKind::kInput);
  for (size_t l = 0; l < layers; ++l) {
    w[l] = AddBuffer(it, width[l] * width[l + 1] * 4, BufferKind::kParam);
    gw[l] = AddBuffer(it, width[l] * width[l + 1] * 4, BufferKind::kGrad);
    mom[l] = AddBuffer(it, width[l] * width[l + 1] * 4, BufferKind::kState);
  }
  auto gemm = [&](size_t l) { return 2 * kBatch * width[l] * width[l + 1]; };
  for (size_t l = 0; l < layers; ++l) {
    z[l] = act(l + 1);
    a[l + 1] = act(l + 1);
    AddOp(it, "aten::addmm", Phase::kForward, {a[l], w[l]}, {z[l]}, gemm(l), 0);
    AddOp(it, "aten::relu", Phase::kForward, {z[l]}, {a[l + 1]}, kBatch * width[l + 1], 0);
  }
  trace::BufferId g = AddBuffer(it, kBatch * width[layers] * 4, BufferKind::kTemp);
  AddOp(it, "aten::mse_loss_backward", Phase::kBackward, {a[layers]}, {g}, kBatch * width[layers], 0);
  for (size_t l = layers; l-- > 0;) {
    const trace::BufferId gz = AddBuffer(it, kBatch * width[l + 1] * 4, BufferKind::kTemp);
    AddOp(it, "aten::threshold_backward", Phase::kBackward, {g, a[l + 1]}, {gz}, kBatch * width[l + 1], 0);
    const trace::BufferId ga = AddBuffer(it, kBatch * width[l] * 4, BufferKind::kTemp);
    AddOp(it, "aten::mm", Phase::kBackward, {gz, a[l], w[l]}, {ga, gw[l]}, 2 * gemm(l), 0);
    g = ga;
  }
  for (size_t l = 0; l < layers; ++l) {
    AddOp(it, "aten::_foreach_add_", Phase::kOptimizer, {w[l], gw[l], mom[l]}, {w[l], mom[l]}, 3 * width[l] * width[l + 1],
          0);
  }
  return it;
}

}  // namespace karma::testing
