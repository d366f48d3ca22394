// The paper's data-parallel pipeline over one rank's simulated iteration: each gradient leaves the device once the
// backward pass has written it (stage 3), is exchanged with the other ranks (stage 4: phased with the MG-WFBP rule,
// or one exchange after the backward pass), updated by the host optimizer (stage 5), and its parameter comes back
// to the device before the next iteration's forward pass first reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ground/exchange/cost_model.h"
#include "policy/plan.h"
#include "policy/simulator.h"

namespace karma::policy {

struct DataParallelOptions {
  int ranks = 1;
  // The network: start-up and bandwidth of the link each rank sends on. A ring allreduce of B bytes over N ranks
  // sends and receives 2 (N - 1) / N * B per rank, so one exchange costs alpha + 2 (N - 1) / N * B / bandwidth.
  double alpha_s = 0;
  double network_bw = 0;  // bytes/s
  enum class Exchange : uint8_t { kPhased, kEnd };
  Exchange exchange = Exchange::kPhased;
  // The host optimizer's rate, parameters per second (fp32 Adam on 2 threads of this project's development
  // machine: 1.39e9, docs/host-optimizer-bench.md).
  double update_params_per_s = 1.39e9;
  uint64_t max_group_bytes = 256ull << 20;  // as libkarma_mpi.so merges
  // The allreduce model these give for `ranks`.
  dp::CostModel Allreduce() const;
};
const char* Name(DataParallelOptions::Exchange e);
bool ParseExchange(const std::string& s, DataParallelOptions::Exchange* out);

// One piece of work on a lane of the pipeline, in seconds from the iteration's start.
struct PipelineSpan {
  double start_s = 0, end_s = 0;
  uint64_t bytes = 0;
  int group = 0;  // the exchange group it belongs to (0-based, in backward order)
};

// The seconds a lane's spans take in all.
double BusySeconds(const std::vector<PipelineSpan>& spans);

struct DataParallelResult {
  bool feasible = false;
  std::string reason;
  // One rank's device work: the simulated iteration without its optimizer ops (the host runs the update), up to
  // the end of its last other op.
  double device_s = 0;
  // Steady state: the next iteration starts once the device is done and late enough that every parameter is back
  // before its first forward read.
  double iteration_s = 0;
  uint64_t gradient_bytes = 0;
  std::vector<PipelineSpan> out;       // gradients device to host, sharing the engine with the plan's swap-outs
  std::vector<PipelineSpan> exchange;  // one per group
  std::vector<PipelineSpan> update;    // one per group, on the host optimizer's threads
  std::vector<PipelineSpan> in;        // updated parameters host to device, around the plan's swap-ins
  // The group whose parameters decide iteration_s (-1: the device does).
  int critical_group = -1;
  // The share of the exchange that runs while the device computes.
  double ExchangeHidden() const;
};

// `sim` must have its events (SimOptions::record_events). Gradients are the iteration's kGrad buffers; a
// gradient's parameters are those the optimizer ops write from values derived from it. Approximations: the
// iteration's own swap-ins before the parameters arrive are not counted against them, and the device memory the
// host optimizer frees (its state) is not given back to the plan.
DataParallelResult SimulateDataParallel(const SimInput& in, const Plan& plan, const SimResult& sim,
                                        const DataParallelOptions& options);

}  // namespace karma::policy
