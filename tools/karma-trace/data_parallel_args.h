// `--ranks`, `--network`, `--exchange`, `--host-update` of `simulate` and `plan`: the data-parallel pipeline
// (policy/data_parallel.h) over the simulated iteration, and its output.
#pragma once

#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "policy/data_parallel.h"

namespace karma::tools {

struct DataParallelArgs {
  int ranks = 1;
  std::string network = "10,12.5";  // ALPHA_US,GBPS
  std::string exchange = "phased";
  double host_update_gparams = 1.39;
};
void AddDataParallelOptions(CLI::App* sub, DataParallelArgs* args);

// The options as the model takes them; nothing with one rank; an error is printed and `*failed` set.
std::optional<policy::DataParallelOptions> ResolveDataParallel(const DataParallelArgs& args, bool* failed);

// "data-parallel ..." lines; the same as JSON added to a command's object: `data_parallel`, and `iteration_ms`
// becomes the pipeline's period (the one rank's stays as `one_rank_iteration_ms`).
void PrintDataParallel(const policy::DataParallelOptions& o, const policy::DataParallelResult& r);
// One line for a picture: "8 ranks, 2000 us + 1 GB/s, phased exchange: 377.7 ms per iteration, ...".
std::string PipelineCaption(const policy::DataParallelOptions& o, const policy::DataParallelResult& r);
void AddDataParallelJson(const policy::DataParallelOptions& o, const policy::DataParallelResult& r,
                         nlohmann::json* j);

}  // namespace karma::tools
