// Hardware profiles of GPUs and their host links, shared by the planner's cost model and simcuda.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "ground/common/status.h"

namespace karma::policy {

// One host link's rates, bytes/s each way.
struct LinkRates {
  double h2d_bw = 0;  // host to device
  double d2h_bw = 0;  // device to host
};

// How a plan's moves travel: managed memory's prefetches and evictions (libkarma.so today, the paper's path), or
// copies on the copy engines between device memory and pinned host memory.
enum class MovePath : uint8_t { kManaged, kCopy };

// Seconds of the calling thread's time that CUDA's virtual memory calls take, by where the chunks live; the driver
// runs them one at a time, whichever thread calls.
struct VmmCosts {
  double create_s = 0;           // cuMemCreate, per 2 MiB
  double map_s = 0;              // cuMemMap of one chunk
  double set_access_s = 0;       // cuMemSetAccess: a range's first 2 MiB ...
  double set_access_more_s = 0;  // ... and each further 2 MiB
  double unmap_s = 0;            // cuMemUnmap of one mapping
  double release_s = 0;          // cuMemRelease, per 2 MiB
};

// Seconds of the calling thread's time that CUDA calls take (simcuda's host clocks); 0: free.
struct HostCosts {
  double launch_s = 0;         // a kernel launch
  double call_s = 0;           // any other call that enqueues work or allocates (copy, memset, stream, ...)
  double order_call_s = 0;     // a call that only orders work: an event's record, a stream's wait on an event
  double prefetch_call_s = 0;  // one per-range managed prefetch to the device (it returns before its transfer)
  VmmCosts device_chunks;      // chunks of device memory
  VmmCosts host_chunks;        // chunks of pinned host memory (CU_MEM_LOCATION_TYPE_HOST, HOST_NUMA)
};

// One GPU and its host link. simcuda takes every figure from here; the planner takes the compute and memory
// figures, the fault figures, and the rates of the link its moves use (`moves`: h2d_bw() and d2h_bw()).
struct HwProfile {
  const char* name;
  const char* description;
  uint64_t memory_bytes;   // device memory
  double flops_per_s;      // fp32 compute rate F of the roofline
  double memory_bw;        // device memory bandwidth B (bytes/s)
  LinkRates copy;          // copy engines, device memory to and from pinned host memory
  LinkRates managed;       // managed memory: prefetches to the device, prefetches to the host and evictions
  double pageable_bw;      // copies to or from pageable host memory, either way (staged by the driver)
  double fault_latency_s;  // fixed cost of one managed-memory fault batch (2 MiB page group)
  double fault_bw;         // effective migration bandwidth of fault-driven paging (bytes/s)
  double kernel_launch_s;  // per-kernel fixed overhead on the device
  HostCosts host{};
  MovePath moves = MovePath::kManaged;

  // The link the plan's moves use, and its rates.
  const LinkRates& link() const { return moves == MovePath::kCopy ? copy : managed; }
  double h2d_bw() const { return link().h2d_bw; }
  double d2h_bw() const { return link().d2h_bw; }
};

// Host links other than a profile's: rates measured on the machine (libkarma.so times the plan's moves), or given
// (karma-trace --link, simcuda's SIMCUDA_LINK).
// "H2D/D2H" or one figure for both, in GB/s (decimal): {h2d_bw, d2h_bw} in bytes/s.
Result<std::pair<double, double>> ParseLinkRates(std::string_view text);
// The profile with the rates of its moves' link (`link()`) replaced where given (> 0).
HwProfile WithLink(const HwProfile& profile, double h2d_bw, double d2h_bw);
// A measured rate rounded to two significant digits (of GB/s), so that a machine measuring a little differently
// makes the same plan keys; 0 stays 0.
double RoundedRate(double bytes_per_s);
// How plan keys, plan caches and plan files name a profile: its name, followed by " link H/D GB/s" where the rates
// of its moves are not those of the profile of that name (its moves over another link, or measured rates).
std::string ProfileLabel(const HwProfile& profile);
// The profile a label names when it is `base` with other link rates (ProfileLabel of a WithLink profile); false
// when the label is not of that form.
bool ProfileFromLabel(const HwProfile& base, const std::string& label, HwProfile* out);

// Every profile; the first is the default (the paper's platform).
std::span<const HwProfile> AllProfiles();
const HwProfile& DefaultProfile();
// Looks a profile up by name, or by an older name (h100-80g-um: h100-80g; h100-80g-pcie5: h100-80g with its moves
// on the copy engines); the error lists the known names.
Result<HwProfile> FindProfile(std::string_view name);
std::string ProfileNames();  // "a, b, c"

}  // namespace karma::policy
