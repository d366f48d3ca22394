// The data-parallel options of `simulate` and `plan`, and what they print.
#include "tools/karma-trace/data_parallel_args.h"

#include <fmt/format.h>

#include "ground/common/units.h"
#include "tools/karma-trace/commands.h"

namespace karma::tools {
namespace {

double Ms(double s) { return s * 1e3; }

// "8 ranks, 2000 us + 1 GB/s"
std::string Network(const policy::DataParallelOptions& o) {
  return fmt::format("{:.0f} us + {:.3g} GB/s", o.alpha_s * 1e6, o.network_bw / 1e9);
}

}  // namespace

void AddDataParallelOptions(CLI::App* sub, DataParallelArgs* args) {
  sub->add_option("--ranks", args->ranks,
                  "data-parallel ranks: above 1, the iteration's gradients go to the host as the backward pass "
                  "finishes them, are exchanged over --network, updated on the host (--host-update) and the "
                  "parameters come back before the next forward pass reads them; iteration_ms is then that "
                  "pipeline's period")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--network", args->network,
                  "ALPHA_US,GBPS: start-up and bandwidth of each rank's link (as KARMA_MPI_COST); a ring allreduce "
                  "of B bytes costs ALPHA + 2(N-1)/N * B / bandwidth")
      ->capture_default_str();
  sub->add_option("--exchange", args->exchange,
                  "phased: allreduces grouped by the MG-WFBP rule as gradients get ready (libkarma_mpi.so's); end: "
                  "one allreduce after the backward pass")
      ->capture_default_str()
      ->check(CLI::IsMember({"phased", "end"}));
  sub->add_option("--host-update", args->host_update_gparams,
                  "the host optimizer's rate in billions of parameters per second (fp32 Adam, 2 threads, measured "
                  "by bench_host_optimizer: docs/host-optimizer-bench.md)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

std::optional<policy::DataParallelOptions> ResolveDataParallel(const DataParallelArgs& args, bool* failed) {
  *failed = false;
  if (args.ranks <= 1) return std::nullopt;
  auto cost = dp::ParseCostModel(args.network);
  if (!cost.ok()) {
    std::fprintf(stderr, "%s: error: --network: %s\n", ProgramName().c_str(), cost.status().message().c_str());
    *failed = true;
    return std::nullopt;
  }
  policy::DataParallelOptions o;
  o.ranks = args.ranks;
  o.alpha_s = cost->alpha_s;
  o.network_bw = 1 / cost->beta_s_per_byte;
  policy::ParseExchange(args.exchange, &o.exchange);
  o.update_params_per_s = args.host_update_gparams * 1e9;
  return o;
}

void PrintDataParallel(const policy::DataParallelOptions& o, const policy::DataParallelResult& r) {
  if (!r.feasible) {
    fmt::print("ranks       {}: no pipeline: {}\n", o.ranks, r.reason);
    return;
  }
  fmt::print("ranks       {}, network {} ({} exchange): {:.1f} ms per iteration, device {:.1f} ms{}\n", o.ranks,
             Network(o), policy::Name(o.exchange), Ms(r.iteration_s), Ms(r.device_s),
             r.critical_group >= 0 ? fmt::format(" (waits for group {}'s parameters)", r.critical_group + 1) : "");
  fmt::print("pipeline    gradients out {} ({:.1f} ms), {} exchange group{} ({:.1f} ms, {:.0f}% beside the "
             "device's work), host update {:.1f} ms, parameters in {:.1f} ms\n",
             FormatBytes(r.gradient_bytes), Ms(policy::BusySeconds(r.out)), r.exchange.size(), r.exchange.size() == 1 ? "" : "s",
             Ms(policy::BusySeconds(r.exchange)), 100 * r.ExchangeHidden(), Ms(policy::BusySeconds(r.update)), Ms(policy::BusySeconds(r.in)));
}

std::string PipelineCaption(const policy::DataParallelOptions& o, const policy::DataParallelResult& r) {
  return fmt::format("{} ranks, network {}, {} exchange: {:.1f} ms per iteration, the exchange {:.0f}% beside the "
                     "device's work",
                     o.ranks, Network(o), policy::Name(o.exchange), Ms(r.iteration_s), 100 * r.ExchangeHidden());
}

void AddDataParallelJson(const policy::DataParallelOptions& o, const policy::DataParallelResult& r,
                         nlohmann::json* out) {
  nlohmann::json j{{"ranks", o.ranks}, {"network", Network(o)}, {"exchange", policy::Name(o.exchange)},
                   {"feasible", r.feasible}};
  (*out)["one_rank_iteration_ms"] = (*out)["iteration_ms"];
  if (!r.feasible) {
    j["reason"] = r.reason;
    (*out)["data_parallel"] = j;
    return;
  }
  j["iteration_ms"] = Ms(r.iteration_s);
  j["device_ms"] = Ms(r.device_s);
  j["gradient_bytes"] = r.gradient_bytes;
  j["groups"] = r.exchange.size();
  j["out_ms"] = Ms(policy::BusySeconds(r.out));
  j["exchange_ms"] = Ms(policy::BusySeconds(r.exchange));
  j["exchange_hidden"] = r.ExchangeHidden();
  j["update_ms"] = Ms(policy::BusySeconds(r.update));
  j["in_ms"] = Ms(policy::BusySeconds(r.in));
  j["critical_group"] = r.critical_group;
  (*out)["data_parallel"] = j;
  (*out)["iteration_ms"] = Ms(r.iteration_s);  // the pipeline's period
}

}  // namespace karma::tools
