// bench_overhead: host nanoseconds per intercepted kernel launch under libkarma.so on simcuda, by mode.
//
// Without --child it runs itself through scripts/simrun once per configuration (no libkarma.so; KARMA_MODE=off,
// um, record, auto with each residency: managed memory and the copy path) and prints a table. With --child it
// launches an empty kernel in iterations of --launches launches of different grids (each iteration also allocates
// and frees one buffer, so that an iteration can be detected) and prints, per iteration, the mean wall-clock
// nanoseconds per launch. The parent reports, for record, the iterations while libkarma.so observes (before the
// recording ends) and, for auto, the steady state after the plan is replayed: the last quarter of the iterations.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/sim_kernel.h"

namespace {

struct Empty {
  static constexpr const char* kName = "empty";
  static void Body(const float*) {}
  // It names the 4 KiB it gets: a kernel without ranges would touch the whole allocation its pointer lies in (the
  // arena's 256 MiB segment under KARMA), and simcuda's walk over its pages would be measured as KARMA's cost.
  static void Cost(simcuda_cost* c, const float* p) {
    c->flops = 0;
    c->bytes = 0;
    simcuda_add_range(c, p, kBufferBytes);
  }
  static constexpr size_t kBufferBytes = 4096;
};
const apps::Module<Empty> kModule;

int Child(int iters, int launches) {
  float* keep = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&keep), Empty::kBufferBytes) != cudaSuccess) return 1;
  cudaStream_t s = nullptr;
  if (cudaStreamCreate(&s) != cudaSuccess) return 1;
  for (int i = 0; i < iters; ++i) {
    float* tmp = nullptr;
    if (cudaMallocAsync(reinterpret_cast<void**>(&tmp), Empty::kBufferBytes, s) != cudaSuccess) return 1;
    const auto t0 = std::chrono::steady_clock::now();
    // Every launch of an iteration differs (its grid), so that the iteration is the only period to find.
    for (int k = 0; k < launches; ++k) {
      apps::Launch<Empty>(dim3(1 + static_cast<unsigned>(k)), dim3(32), s, k % 2 == 0 ? keep : tmp);
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (cudaGetLastError() != cudaSuccess || cudaFreeAsync(tmp, s) != cudaSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess) {
      return 1;
    }
    std::printf("iter %d ns_per_launch %.1f\n",
                i, std::chrono::duration<double, std::nano>(t1 - t0).count() / launches);
  }
  return 0;
}

// Per-iteration figures of one child run.
std::vector<double> RunChild(const std::string& self, const std::string& env, bool karma, int iters, int launches) {
  const std::string cmd = env + " " + KARMA_SOURCE_DIR "/scripts/simrun --build " KARMA_BINARY_DIR +
                          (karma ? " --karma" : "") + " -- " + self + " --child " + std::to_string(iters) + " " +
                          std::to_string(launches) + " 2>/dev/null";
  std::vector<double> out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char line[256];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    int i = 0;
    double ns = 0;
    if (std::sscanf(line, "iter %d ns_per_launch %lf", &i, &ns) == 2) out.push_back(ns);
  }
  if (pclose(p) != 0) out.clear();
  return out;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--child") return Child(std::atoi(argv[2]), std::atoi(argv[3]));
  int iters = 40, launches = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--iters") iters = std::max(8, std::atoi(argv[i + 1]));
    else if (a == "--launches") launches = std::max(10, std::atoi(argv[i + 1]));
  }
  const std::string self = "/proc/" + std::to_string(getpid()) + "/exe";
  char path[4096];
  const ssize_t n = readlink(self.c_str(), path, sizeof path - 1);
  if (n <= 0) return 1;
  path[n] = 0;
  char dir[] = "/tmp/bench_overhead.XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  const std::string traces = std::string(" KARMA_TRACE_DIR=") + dir;
  struct Config {
    const char* name;
    std::string env;
    bool karma;
    bool steady;  // the last quarter (replay); else the iterations before the recording ends (record)
  };
  const Config configs[] = {
      {"no libkarma.so", "", false, true},
      {"KARMA_MODE=off", "KARMA_MODE=off", true, true},
      {"KARMA_MODE=um", "KARMA_MODE=um", true, true},
      {"record (observing)", "KARMA_MODE=record" + traces + "/record", true, false},
      {"auto (replaying), managed", "KARMA_MODE=auto KARMA_RESIDENCY=managed" + traces + "/managed", true, true},
      {"auto (replaying), copy", "KARMA_MODE=auto KARMA_RESIDENCY=copy" + traces + "/copy", true, true},
  };
  std::printf("ns per intercepted launch of an empty kernel on simcuda (%d iterations of %d launches; median)\n\n",
              iters, launches);
  std::printf("| configuration | ns per launch | over no libkarma.so |\n|---|---|---|\n");
  double base = 0;
  for (const Config& c : configs) {
    std::vector<double> v = RunChild(path, c.env, c.karma, iters, launches);
    if (v.empty()) {
      std::printf("| %s | failed | |\n", c.name);
      continue;
    }
    // Observation covers the first iterations: detection needs three, the recorded one is the fourth.
    std::vector<double> part = c.steady ? std::vector<double>(v.end() - static_cast<long>(v.size() / 4), v.end())
                                        : std::vector<double>(v.begin() + 1, v.begin() + 4);
    const double ns = Median(part);
    if (base == 0) base = ns;
    std::printf("| %s | %.0f | %+.0f |\n", c.name, ns, ns - base);
  }
  (void)std::system(("rm -rf " + std::string(dir)).c_str());
  return 0;
}
