// move_costs: what moving data costs on this GPU (copies, CUDA's VMM API, launches), to check simcuda's H100 figures.
//
//   move_costs [--quick] [--reps R]     R repetitions per figure (median; default 5, --quick 3 and fewer calls)
//
// simcuda's H100 figures (policy/hw_profile.cc) assume rates for the copy engines each way and for device memory,
// and host times for a launch, a stream call, cuMemMap, cuMemSetAccess and cuMemUnmap: this measures each, and what
// remapping a range (the way to swap a tensor's backing under a stable pointer, DESIGN.md "Real GPUs") costs a
// kernel running meanwhile.
// One plain-text table per measurement, every figure measured here: device times from CUDA events, host times from
// std::chrono around the call itself. GB/s are decimal (1e9 bytes). Device memory used stays under 1 GiB; the
// managed allocation is sized against cudaMemGetInfo's free memory (never oversubscribed). Meant to take well under
// a minute on an H100 (lent_session.sh gives it 60 s); it prints its own run time last.
// Build: nvcc -O2 -std=c++17 -gencode 'arch=compute_90,code=[sm_90,compute_90]' -o move_costs move_costs.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#define CHECK(x)                                                                                       \
  do {                                                                                                 \
    cudaError_t e_ = (x);                                                                              \
    if (e_ != cudaSuccess) {                                                                           \
      std::fprintf(stderr, "move_costs: %s failed: %s (%s, line %d)\n", #x, cudaGetErrorString(e_),    \
                   cudaGetErrorName(e_), __LINE__);                                                    \
      std::exit(1);                                                                                    \
    }                                                                                                  \
  } while (0)

#define CU_CHECK(x)                                                                                    \
  do {                                                                                                 \
    CUresult r_ = (x);                                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                                          \
      std::fprintf(stderr, "move_costs: %s failed: %s (line %d)\n", #x, CuName(r_).c_str(), __LINE__); \
      std::exit(1);                                                                                    \
    }                                                                                                  \
  } while (0)

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kMax = 256 * kMiB;
constexpr size_t kSizes[] = {2 * kMiB, 20 * kMiB, kMax};
constexpr int kThreads = 256;

int g_dev = 0;
CUdevice g_cudev = 0;
int g_sms = 1;
int g_reps = 5;
bool g_quick = false;
cudaStream_t g_s1 = nullptr, g_s2 = nullptr;
cudaEvent_t g_ev[6];
float* g_sums = nullptr;  // one float per thread of a Blocks() x kThreads grid

std::string CuName(CUresult r) {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) == CUDA_SUCCESS && name != nullptr) return name;
  return "CUresult " + std::to_string(static_cast<int>(r));
}

__global__ void Empty() {}

__device__ unsigned long long GlobalNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Holds its stream for `ns`: the calls queued behind it then run at the GPU's own rate, not the host's.
__global__ void Spin(unsigned long long ns) {
  const unsigned long long t0 = GlobalNs();
  while (GlobalNs() - t0 < ns) {
  }
}

// Memory-bound: reads and writes every element `passes` times.
__global__ void Touch(float4* p, size_t n, int passes) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (int k = 0; k < passes; ++k) {
    for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
      float4 v = p[i];
      v.x = v.x * 0.999f + 1.0f;
      v.y = v.y * 0.999f + 1.0f;
      v.z = v.z * 0.999f + 1.0f;
      v.w = v.w * 0.999f + 1.0f;
      p[i] = v;
    }
  }
}

// Reads only (a sum per thread, so the loads stay).
__global__ void ReadSum(const float4* p, size_t n, float* out) {
  const size_t t = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  float sum = 0;
  for (size_t i = t; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float4 v = p[i];
    sum += v.x + v.y + v.z + v.w;
  }
  out[t] = sum;
}

// Writes only.
__global__ void Fill(float4* p, size_t n, float value) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    p[i] = make_float4(value, value, value, value);
  }
}

// One thread stores `value` to a host flag, visible to the host once it lands.
__global__ void Signal(volatile unsigned* flag, unsigned value) {
  *flag = value;
  __threadfence_system();
}

int Blocks() { return g_sms * 8; }

double Us(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

double Ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}
double Median(const std::vector<double>& v) { return Quantile(v, 0.5); }
double Max(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

std::string F(double v, int precision = 1) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", precision, v);
  return b;
}
std::string MiB(size_t bytes) { return F(static_cast<double>(bytes) / kMiB, bytes % kMiB == 0 ? 0 : 2); }
std::string KiB(size_t bytes) { return F(static_cast<double>(bytes) / 1024, bytes % 1024 == 0 ? 0 : 2); }
double GBps(size_t bytes, double ms) { return ms > 0 ? static_cast<double>(bytes) / (ms * 1e-3) / 1e9 : 0; }
std::string Count(int k, int of) { return std::to_string(k) + "/" + std::to_string(of); }

// A title, headers with units, aligned columns (the first left-aligned), notes under it. Flushed at once: a run
// cut short by a timeout keeps the tables it finished.
class Table {
 public:
  Table(std::string title, std::vector<std::string> head) : title_(std::move(title)), head_(std::move(head)) {}
  void Add(std::vector<std::string> row) {
    row.resize(head_.size());
    rows_.push_back(std::move(row));
  }
  void Note(std::string note) { notes_.push_back(std::move(note)); }
  void Print() const {
    std::vector<size_t> w(head_.size());
    for (size_t c = 0; c < head_.size(); ++c) {
      w[c] = head_[c].size();
      for (const auto& r : rows_) w[c] = std::max(w[c], r[c].size());
    }
    std::printf("\n%s\n", title_.c_str());
    Line(head_, w);
    size_t total = 0;
    for (size_t x : w) total += x + 2;
    std::printf("%s\n", std::string(total - 2, '-').c_str());
    for (const auto& r : rows_) Line(r, w);
    for (const auto& n : notes_) std::printf("  %s\n", n.c_str());
    std::fflush(stdout);
  }

 private:
  static void Line(const std::vector<std::string>& cells, const std::vector<size_t>& w) {
    std::string s;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) s += "  ";
      const std::string pad(w[c] - cells[c].size(), ' ');
      s += c == 0 ? cells[c] + pad : pad + cells[c];
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    std::printf("%s\n", s.c_str());
  }

  std::string title_;
  std::vector<std::string> head_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<std::string> notes_;
};

// ---- 8: the device, the driver, and what they support ----------------------------------------------------------

std::string CuAttr(CUdevice_attribute a) {
  int v = 0;
  const CUresult r = cuDeviceGetAttribute(&v, a, g_cudev);
  return r == CUDA_SUCCESS ? std::to_string(v) : std::string("query refused: ") + CuName(r);
}
std::string RtAttr(cudaDeviceAttr a) {
  int v = 0;
  CHECK(cudaDeviceGetAttribute(&v, a, g_dev));
  return std::to_string(v);
}
std::string Version(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) + " (" + std::to_string(v) + ")";
}

int DeviceTable() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, g_dev));
  char bus[32] = {};
  CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, g_dev));
  int driver = 0, runtime = 0;
  CU_CHECK(cuDriverGetVersion(&driver));
  CHECK(cudaRuntimeGetVersion(&runtime));
  size_t free = 0, total = 0;
  CHECK(cudaMemGetInfo(&free, &total));
  Table t("Device and driver (queried)", {"property", "value"});
  t.Add({"device", std::to_string(g_dev) + ": " + prop.name + ", PCI " + bus});
  t.Add({"SMs", std::to_string(prop.multiProcessorCount)});
  t.Add({"memory MiB (total / free at start)", MiB(total) + " / " + MiB(free)});
  t.Add({"CUDA driver API version", Version(driver)});
  t.Add({"CUDA runtime version", Version(runtime)});
  t.Add({"copy engines (cudaDevAttrAsyncEngineCount)", RtAttr(cudaDevAttrAsyncEngineCount)});
  t.Add({"concurrentManagedAccess", RtAttr(cudaDevAttrConcurrentManagedAccess)});
  t.Add({"pageableMemoryAccess", RtAttr(cudaDevAttrPageableMemoryAccess)});
  t.Add({"VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED", CuAttr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)});
  t.Add({"HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
         CuAttr(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)});
  t.Add({"HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
         CuAttr(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)});
  t.Add({"HOST_NUMA_ID", CuAttr(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID)});
  t.Add({"CAN_USE_64_BIT_STREAM_MEM_OPS", CuAttr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)});
  t.Print();
  int numa = -1;
  if (cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, g_cudev) != CUDA_SUCCESS) numa = -1;
  return numa;
}

// ---- 1, 2: cudaMemcpyAsync, pinned and pageable --------------------------------------------------------------

struct CopyFigures {
  double call_us = 0, device_ms = 0, done_ms = 0;
  int idle_at_return = 0;  // repetitions where the stream had nothing left to do when the call returned
};

// One copy on g_s1 per repetition: the call's host time, the device time between events around it, the host time
// from the call to the stream's end, and whether the stream was already done when the call returned.
CopyFigures OneWay(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  std::vector<double> call, device, done;
  int idle = 0;
  CHECK(cudaMemcpyAsync(dst, src, bytes, kind, g_s1));  // warm-up
  for (int r = 0; r < g_reps; ++r) {
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaEventRecord(g_ev[0], g_s1));
    const auto t0 = Clock::now();
    CHECK(cudaMemcpyAsync(dst, src, bytes, kind, g_s1));
    const auto t1 = Clock::now();
    const cudaError_t q = cudaStreamQuery(g_s1);
    if (q == cudaSuccess) {
      ++idle;
    } else if (q != cudaErrorNotReady) {
      CHECK(q);
    }
    CHECK(cudaEventRecord(g_ev[1], g_s1));
    CHECK(cudaStreamSynchronize(g_s1));
    const auto t2 = Clock::now();
    call.push_back(Us(t0, t1));
    done.push_back(Us(t0, t2) / 1000);
    device.push_back(Ms(g_ev[0], g_ev[1]));
  }
  return {Median(call), Median(device), Median(done), idle};
}

struct Buffers {
  char* dev[2] = {nullptr, nullptr};     // kMax each, cudaMalloc
  char* pinned[2] = {nullptr, nullptr};  // kMax each, cudaMallocHost
  char* pageable = nullptr;              // kMax, new[], touched
};

void PinnedCopies(const Buffers& b) {
  Table t("Pinned copies (cudaMallocHost <-> cudaMalloc), cudaMemcpyAsync; 'both': one each way at once on two "
          "streams, each direction timed from the common start (median of " + std::to_string(g_reps) + ")",
          {"direction", "size MiB", "call us", "device ms", "GB/s"});
  for (size_t bytes : kSizes) {
    const CopyFigures h2d = OneWay(b.dev[0], b.pinned[0], bytes, cudaMemcpyHostToDevice);
    t.Add({"to device", MiB(bytes), F(h2d.call_us), F(h2d.device_ms, 3), F(GBps(bytes, h2d.device_ms))});
    const CopyFigures d2h = OneWay(b.pinned[1], b.dev[1], bytes, cudaMemcpyDeviceToHost);
    t.Add({"to host", MiB(bytes), F(d2h.call_us), F(d2h.device_ms, 3), F(GBps(bytes, d2h.device_ms))});
    std::vector<double> call_h2d, call_d2h, h2d_ms, d2h_ms, span_ms;
    for (int r = 0; r < g_reps; ++r) {
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaEventRecord(g_ev[0], g_s1));
      CHECK(cudaStreamWaitEvent(g_s2, g_ev[0], 0));
      const auto t0 = Clock::now();
      CHECK(cudaMemcpyAsync(b.dev[0], b.pinned[0], bytes, cudaMemcpyHostToDevice, g_s1));
      const auto t1 = Clock::now();
      CHECK(cudaMemcpyAsync(b.pinned[1], b.dev[1], bytes, cudaMemcpyDeviceToHost, g_s2));
      const auto t2 = Clock::now();
      CHECK(cudaEventRecord(g_ev[1], g_s1));
      CHECK(cudaEventRecord(g_ev[2], g_s2));
      CHECK(cudaDeviceSynchronize());
      call_h2d.push_back(Us(t0, t1));
      call_d2h.push_back(Us(t1, t2));
      h2d_ms.push_back(Ms(g_ev[0], g_ev[1]));
      d2h_ms.push_back(Ms(g_ev[0], g_ev[2]));
      span_ms.push_back(std::max(h2d_ms.back(), d2h_ms.back()));
    }
    const double h = Median(h2d_ms), d = Median(d2h_ms), s = Median(span_ms);
    t.Add({"both: to device", MiB(bytes), F(Median(call_h2d)), F(h, 3), F(GBps(bytes, h))});
    t.Add({"both: to host", MiB(bytes), F(Median(call_d2h)), F(d, 3), F(GBps(bytes, d))});
    t.Add({"both: together", MiB(2 * bytes), "", F(s, 3), F(GBps(2 * bytes, s))});
  }
  t.Print();
}

void PageableCopies(const Buffers& b) {
  Table t("Pageable copies (new[], touched <-> cudaMalloc), cudaMemcpyAsync on a created stream; 'idle at return': "
          "repetitions where the stream had finished when the call returned (median of " + std::to_string(g_reps) +
          ")",
          {"direction", "size MiB", "call us", "idle at return", "device ms", "GB/s (events)", "host ms to done",
           "GB/s (host)"});
  for (size_t bytes : kSizes) {
    for (bool h2d : {true, false}) {
      const CopyFigures f = h2d ? OneWay(b.dev[0], b.pageable, bytes, cudaMemcpyHostToDevice)
                                : OneWay(b.pageable, b.dev[1], bytes, cudaMemcpyDeviceToHost);
      t.Add({h2d ? "to device" : "to host", MiB(bytes), F(f.call_us), Count(f.idle_at_return, g_reps),
             F(f.device_ms, 3), F(GBps(bytes, f.device_ms)), F(f.done_ms, 3), F(GBps(bytes, f.done_ms))});
    }
  }
  t.Note("host ms to done: from the call to cudaStreamSynchronize's return; GB/s (host) from it");
  t.Print();
}

// ---- 3, 4, 5: CUDA's VMM API ----------------------------------------------------------------------------------

CUmemLocation Location(CUmemLocationType type, int id) {
  CUmemLocation l{};
  l.type = type;
  l.id = id;
  return l;
}
CUmemLocation DeviceLocation() { return Location(CU_MEM_LOCATION_TYPE_DEVICE, g_dev); }

CUmemAllocationProp Prop(const CUmemLocation& where) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  p.location = where;
  return p;
}

CUresult Granularity(const CUmemLocation& where, CUmemAllocationGranularity_flags which, size_t* g) {
  const CUmemAllocationProp p = Prop(where);
  return cuMemGetAllocationGranularity(g, &p, which);
}

// Read-write access for this device: the GPU reaches the range whatever backs it.
CUresult Access(CUdeviceptr va, size_t bytes) {
  CUmemAccessDesc d{};
  d.location = DeviceLocation();
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return cuMemSetAccess(va, bytes, &d, 1);
}

size_t RoundUp(size_t n, size_t g) { return g == 0 ? n : (n + g - 1) / g * g; }

// A virtual range aligned to the backing's granularity (cuMemMap's requirement).
CUdeviceptr Reserve(size_t bytes, size_t alignment) {
  CUdeviceptr va = 0;
  CU_CHECK(cuMemAddressReserve(&va, bytes, alignment, 0, 0));
  return va;
}

struct Backing {
  std::string name;
  CUmemLocation where{};
  size_t granularity = 0;  // minimum
  bool ok = false;
};

// A chunk created and mapped (read-write for this device) in a range of its own.
struct Mapping {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = 0;
  size_t bytes = 0;
};
Mapping Map(const Backing& b, size_t bytes) {
  Mapping m;
  m.bytes = RoundUp(bytes, b.granularity);
  const CUmemAllocationProp p = Prop(b.where);
  CU_CHECK(cuMemCreate(&m.handle, m.bytes, &p, 0));
  m.va = Reserve(m.bytes, b.granularity);
  CU_CHECK(cuMemMap(m.va, m.bytes, 0, m.handle, 0));
  CU_CHECK(Access(m.va, m.bytes));
  return m;
}
void Unmap(const Mapping& m) {
  CU_CHECK(cuMemUnmap(m.va, m.bytes));
  CU_CHECK(cuMemRelease(m.handle));
  CU_CHECK(cuMemAddressFree(m.va, m.bytes));
}

// Whether a 2 MiB chunk backed at `where` can be created, mapped and made accessible; the first error otherwise.
CUresult TryBacking(Backing& b) {
  CUresult r = Granularity(b.where, CU_MEM_ALLOC_GRANULARITY_MINIMUM, &b.granularity);
  if (r != CUDA_SUCCESS) return r;
  const size_t bytes = RoundUp(2 * kMiB, b.granularity);
  const CUmemAllocationProp p = Prop(b.where);
  CUmemGenericAllocationHandle h = 0;
  if ((r = cuMemCreate(&h, bytes, &p, 0)) != CUDA_SUCCESS) return r;
  const CUdeviceptr va = Reserve(bytes, b.granularity);
  if ((r = cuMemMap(va, bytes, 0, h, 0)) == CUDA_SUCCESS) {
    r = Access(va, bytes);
    CU_CHECK(cuMemUnmap(va, bytes));
  }
  CU_CHECK(cuMemRelease(h));
  CU_CHECK(cuMemAddressFree(va, bytes));
  return r;
}

struct Backings {
  Backing device, host;
};

// The granularities, and the host location host-backed chunks use: CU_MEM_LOCATION_TYPE_HOST, else HOST_NUMA.
Backings Granularities(int numa) {
  const int node = numa >= 0 ? numa : 0;
  Table t("VMM allocation granularity (cuMemGetAllocationGranularity)",
          {"location", "minimum KiB", "recommended KiB", "2 MiB chunk created, mapped, set accessible"});
  Backing device{"device", DeviceLocation()};
  std::vector<Backing> host = {{"host", Location(CU_MEM_LOCATION_TYPE_HOST, 0)},
                               {"host NUMA " + std::to_string(node), Location(CU_MEM_LOCATION_TYPE_HOST_NUMA, node)}};
  const char* types[] = {"CU_MEM_LOCATION_TYPE_DEVICE", "CU_MEM_LOCATION_TYPE_HOST", "CU_MEM_LOCATION_TYPE_HOST_NUMA"};
  Backing chosen;
  for (size_t i = 0; i < 3; ++i) {
    Backing& b = i == 0 ? device : host[i - 1];
    size_t min = 0, rec = 0;
    const CUresult rm = Granularity(b.where, CU_MEM_ALLOC_GRANULARITY_MINIMUM, &min);
    const CUresult rr = Granularity(b.where, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED, &rec);
    const CUresult use = TryBacking(b);
    b.ok = use == CUDA_SUCCESS;
    t.Add({std::string(types[i]) + " (" + std::to_string(b.where.id) + ")",
           rm == CUDA_SUCCESS ? KiB(min) : CuName(rm), rr == CUDA_SUCCESS ? KiB(rec) : CuName(rr),
           b.ok ? "yes" : std::string("no: ") + CuName(use)});
    if (i > 0 && b.ok && !chosen.ok) chosen = b;
  }
  if (!device.ok) {
    std::fprintf(stderr, "move_costs: device-backed VMM chunks do not work here\n");
    std::exit(1);
  }
  t.Note(chosen.ok ? "host-backed chunks below use " + chosen.name + " (" +
                         (chosen.where.type == CU_MEM_LOCATION_TYPE_HOST ? types[1] : types[2]) + ")"
                   : "neither host location works: the host-backed rows below are skipped");
  t.Print();
  return {device, chosen};
}

// The backings that work, device first; a "skipped" row in `t` for each that does not.
std::vector<const Backing*> Usable(Table& t, const Backing& device, const Backing& host) {
  std::vector<const Backing*> usable;
  for (const Backing* b : {&device, &host}) {
    if (b->ok) usable.push_back(b);
    else t.Add({b->name, "-", "skipped"});
  }
  return usable;
}

void VmmCalls(const Backing& device, const Backing& host) {
  Table t("VMM calls, host time per call: cuMemCreate, cuMemMap, cuMemSetAccess (read-write for this device), "
          "cuMemUnmap, cuMemRelease of one chunk (median of " + std::to_string(g_reps) + ")",
          {"backing", "chunk MiB", "create us", "map us", "setAccess us", "map+setAccess us", "unmap us",
           "release us"});
  for (const Backing* b : Usable(t, device, host)) {
    const CUmemAllocationProp p = Prop(b->where);
    for (size_t size : kSizes) {
      const size_t bytes = RoundUp(size, b->granularity);
      const CUdeviceptr va = Reserve(bytes, b->granularity);
      std::vector<double> create, map, access, both, unmap, release;
      for (int r = 0; r < g_reps; ++r) {
        CUmemGenericAllocationHandle h = 0;
        const auto t0 = Clock::now();
        CU_CHECK(cuMemCreate(&h, bytes, &p, 0));
        const auto t1 = Clock::now();
        CU_CHECK(cuMemMap(va, bytes, 0, h, 0));
        const auto t2 = Clock::now();
        CU_CHECK(Access(va, bytes));
        const auto t3 = Clock::now();
        CU_CHECK(cuMemUnmap(va, bytes));
        const auto t4 = Clock::now();
        CU_CHECK(cuMemRelease(h));
        const auto t5 = Clock::now();
        create.push_back(Us(t0, t1));
        map.push_back(Us(t1, t2));
        access.push_back(Us(t2, t3));
        both.push_back(Us(t1, t3));
        unmap.push_back(Us(t3, t4));
        release.push_back(Us(t4, t5));
      }
      CU_CHECK(cuMemAddressFree(va, bytes));
      t.Add({b->name, MiB(bytes), F(Median(create)), F(Median(map)), F(Median(access)), F(Median(both)),
             F(Median(unmap)), F(Median(release))});
    }
  }
  t.Print();
}

// N adjacent 2 MiB chunks mapped one by one into one range, then their access set and the range unmapped either
// chunk by chunk or with one call over the whole range (the driver may refuse an unmap that spans mappings: the
// table says so). Whether one call over many chunks costs about one call decides whether the copy residency should
// move a block's granules with a few calls rather than a few per granule (simcuda charges an unmap per mapping).
void VmmSpans(const Backing& device, const Backing& host) {
  Table t("VMM calls over N adjacent 2 MiB chunks, host time (median of " + std::to_string(g_reps) + ")",
          {"backing", "N", "N maps us", "setAccess each us", "setAccess once us", "unmap each us",
           "unmap once us"});
  for (const Backing* b : Usable(t, device, host)) {
    const CUmemAllocationProp p = Prop(b->where);
    const size_t chunk = RoundUp(2 * kMiB, b->granularity);
    for (int n : {1, 8, 32}) {
      std::vector<CUmemGenericAllocationHandle> h(n);
      for (auto& x : h) CU_CHECK(cuMemCreate(&x, chunk, &p, 0));
      const size_t bytes = chunk * n;
      const CUdeviceptr va = Reserve(bytes, b->granularity);
      std::vector<double> maps, each, once, unmap_each, unmap_once;
      CUresult refused = CUDA_SUCCESS;
      const auto map_all = [&] {
        const auto t0 = Clock::now();
        for (int i = 0; i < n; ++i) CU_CHECK(cuMemMap(va + i * chunk, chunk, 0, h[i], 0));
        maps.push_back(Us(t0, Clock::now()));
      };
      for (int r = 0; r < g_reps; ++r) {
        map_all();
        auto t0 = Clock::now();
        for (int i = 0; i < n; ++i) CU_CHECK(Access(va + i * chunk, chunk));
        each.push_back(Us(t0, Clock::now()));
        t0 = Clock::now();
        for (int i = 0; i < n; ++i) CU_CHECK(cuMemUnmap(va + i * chunk, chunk));
        unmap_each.push_back(Us(t0, Clock::now()));
        map_all();
        t0 = Clock::now();
        CU_CHECK(Access(va, bytes));
        once.push_back(Us(t0, Clock::now()));
        t0 = Clock::now();
        const CUresult u = cuMemUnmap(va, bytes);
        const double took = Us(t0, Clock::now());
        if (u != CUDA_SUCCESS) {
          refused = u;
          for (int i = 0; i < n; ++i) CU_CHECK(cuMemUnmap(va + i * chunk, chunk));
        } else {
          unmap_once.push_back(took);
        }
      }
      CU_CHECK(cuMemAddressFree(va, bytes));
      for (auto x : h) CU_CHECK(cuMemRelease(x));
      t.Add({b->name, std::to_string(n), F(Median(maps)), F(Median(each)), F(Median(once)), F(Median(unmap_each)),
             refused == CUDA_SUCCESS ? F(Median(unmap_once)) : std::string("refused: ") + CuName(refused)});
    }
  }
  t.Note("once about one call's cost for any N: one call over a block's granules is worth making");
  t.Print();
}

// VMM calls from several host threads at once, each remapping a 2 MiB device chunk of its own (cuMemMap,
// cuMemSetAccess, cuMemUnmap): whether the driver runs them side by side or one at a time. simcuda counts each
// thread's calls on that thread's clock, as if side by side; the copy residency makes them from several threads
// (its lanes' finishing threads and its host mapper).
void VmmThreads(const Backing& device) {
  constexpr int kRemaps = 50;
  Table t("VMM remaps from threads at once: each thread maps, sets access and unmaps a chunk of its own " +
              std::to_string(kRemaps) + " times (median of " + std::to_string(g_reps) + ")",
          {"threads", "us per remap, each thread", "remaps per ms, all threads", "x one thread"});
  const size_t bytes = RoundUp(2 * kMiB, device.granularity);
  const CUmemAllocationProp prop = Prop(device.where);
  double one = 0;
  for (int n : {1, 2, 4}) {
    std::vector<double> per_remap, rate;
    for (int r = 0; r < g_reps; ++r) {
      std::vector<CUmemGenericAllocationHandle> h(n);
      std::vector<CUdeviceptr> va(n);
      for (int i = 0; i < n; ++i) {
        CU_CHECK(cuMemCreate(&h[i], bytes, &prop, 0));
        va[i] = Reserve(bytes, device.granularity);
      }
      std::atomic<int> ready{0};
      std::atomic<bool> go{false};
      std::vector<double> took(n);
      std::vector<std::thread> threads;
      for (int i = 0; i < n; ++i) {
        threads.emplace_back([&, i] {
          CHECK(cudaSetDevice(g_dev));
          ready.fetch_add(1);
          while (!go.load()) {
          }
          const auto t0 = Clock::now();
          for (int k = 0; k < kRemaps; ++k) {
            CU_CHECK(cuMemMap(va[i], bytes, 0, h[i], 0));
            CU_CHECK(Access(va[i], bytes));
            CU_CHECK(cuMemUnmap(va[i], bytes));
          }
          took[i] = Us(t0, Clock::now());
        });
      }
      while (ready.load() < n) {
      }
      const auto start = Clock::now();
      go.store(true);
      for (std::thread& th : threads) th.join();
      const double wall_us = Us(start, Clock::now());
      per_remap.push_back(Median(took) / kRemaps);
      rate.push_back(n * kRemaps / (wall_us / 1e3));
      for (int i = 0; i < n; ++i) {
        CU_CHECK(cuMemAddressFree(va[i], bytes));
        CU_CHECK(cuMemRelease(h[i]));
      }
    }
    if (n == 1) one = Median(rate);
    t.Add({std::to_string(n), F(Median(per_remap)), F(Median(rate)), F(Median(rate) / one, 2)});
  }
  t.Note("x one thread near the thread count: the calls run side by side; near 1: one at a time");
  t.Print();
}

double KernelMs(float4* p, size_t n, int passes) {
  CHECK(cudaEventRecord(g_ev[0], g_s1));
  Touch<<<Blocks(), kThreads, 0, g_s1>>>(p, n, passes);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(g_ev[1], g_s1));
  CHECK(cudaStreamSynchronize(g_s1));
  return Ms(g_ev[0], g_ev[1]);
}

// A long memory-bound kernel over its own cudaMalloc buffer, alone and while the host remaps another range
// (cuMemMap + cuMemSetAccess, then cuMemUnmap, of a chunk created once) until the kernel ends.
void RemapDuringKernel(char* buffer, const Backing& device, const Backing& host) {
  float4* p = reinterpret_cast<float4*>(buffer);
  const size_t n = kMax / sizeof(float4);
  const double target_ms = g_quick ? 20 : 40;
  KernelMs(p, n, 1);
  std::vector<double> one;
  for (int r = 0; r < 3; ++r) one.push_back(KernelMs(p, n, 4) / 4);
  const int passes = static_cast<int>(std::clamp(target_ms / std::max(Median(one), 1e-4), 1.0, 100000.0));
  std::vector<double> alone_ms;
  for (int r = 0; r < g_reps; ++r) alone_ms.push_back(KernelMs(p, n, passes));
  const double alone = Median(alone_ms);
  Table t("A memory-bound kernel (" + std::to_string(passes) + " read+write passes over " + MiB(kMax) +
              " MiB) alone and while the host remaps another range until it ends (median of " +
              std::to_string(g_reps) + "; remap times pooled)",
          {"remapped range", "kernel running", "remaps", "map+setAccess us", "unmap us", "max remap us",
           "kernel ms", "x alone"});
  t.Add({"none", "yes", "0", "", "", "", F(alone, 2)});
  const int idle_remaps = g_quick ? 10 : 30;
  for (auto [b, size] : {std::pair{&device, 2 * kMiB}, std::pair{&device, 20 * kMiB}, std::pair{&host, 2 * kMiB}}) {
    const std::string name = b->name + " " + MiB(size) + " MiB";
    if (!b->ok) {
      t.Add({name, "-", "skipped"});
      continue;
    }
    const size_t bytes = RoundUp(size, b->granularity);
    const CUmemAllocationProp prop = Prop(b->where);
    CUmemGenericAllocationHandle h = 0;
    CU_CHECK(cuMemCreate(&h, bytes, &prop, 0));
    const CUdeviceptr va = Reserve(bytes, b->granularity);
    std::vector<double> map_us, unmap_us, remap_us;
    auto remap = [&] {
      const auto t0 = Clock::now();
      CU_CHECK(cuMemMap(va, bytes, 0, h, 0));
      CU_CHECK(Access(va, bytes));
      const auto t1 = Clock::now();
      CU_CHECK(cuMemUnmap(va, bytes));
      const auto t2 = Clock::now();
      map_us.push_back(Us(t0, t1));
      unmap_us.push_back(Us(t1, t2));
      remap_us.push_back(Us(t0, t2));
    };
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < idle_remaps; ++i) remap();
    t.Add({name, "no", std::to_string(idle_remaps), F(Median(map_us)), F(Median(unmap_us)), F(Max(remap_us))});
    map_us.clear();
    unmap_us.clear();
    remap_us.clear();
    std::vector<double> kernel_ms, counts;
    for (int r = 0; r < g_reps; ++r) {
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaEventRecord(g_ev[0], g_s1));
      Touch<<<Blocks(), kThreads, 0, g_s1>>>(p, n, passes);
      CHECK(cudaGetLastError());
      CHECK(cudaEventRecord(g_ev[1], g_s1));
      int count = 0;
      cudaError_t q = cudaErrorNotReady;
      do {
        remap();
        ++count;
      } while ((q = cudaEventQuery(g_ev[1])) == cudaErrorNotReady && count < 100000);
      if (q != cudaErrorNotReady) CHECK(q);
      CHECK(cudaStreamSynchronize(g_s1));
      kernel_ms.push_back(Ms(g_ev[0], g_ev[1]));
      counts.push_back(count);
    }
    const double k = Median(kernel_ms);
    t.Add({name, "yes", F(Median(counts), 0), F(Median(map_us)), F(Median(unmap_us)), F(Max(remap_us)), F(k, 2),
           F(alone > 0 ? k / alone : 0, 2)});
    CU_CHECK(cuMemRelease(h));
    CU_CHECK(cuMemAddressFree(va, bytes));
  }
  t.Note("remaps: per repetition; the first remap starts right after the launch, the last one ends after the kernel");
  t.Print();
}

struct Bandwidth {
  double read_ms = 0, write_ms = 0;
};

// A write-only and a read-only kernel over `bytes` at p (device-accessible).
Bandwidth KernelBandwidth(void* p, size_t bytes) {
  float4* q = static_cast<float4*>(p);
  const size_t n = bytes / sizeof(float4);
  auto write = [&] { Fill<<<Blocks(), kThreads, 0, g_s1>>>(q, n, 1.0f); };
  auto read = [&] { ReadSum<<<Blocks(), kThreads, 0, g_s1>>>(q, n, g_sums); };
  write();
  read();
  CHECK(cudaGetLastError());
  std::vector<double> w, r;
  for (int i = 0; i < g_reps; ++i) {
    CHECK(cudaStreamSynchronize(g_s1));
    CHECK(cudaEventRecord(g_ev[0], g_s1));
    write();
    CHECK(cudaEventRecord(g_ev[1], g_s1));
    read();
    CHECK(cudaEventRecord(g_ev[2], g_s1));
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(g_s1));
    w.push_back(Ms(g_ev[0], g_ev[1]));
    r.push_back(Ms(g_ev[1], g_ev[2]));
  }
  return {Median(r), Median(w)};
}

void MappedBandwidth(const Buffers& buf, const Backing& device, const Backing& host) {
  Table t("Kernel bandwidth: a read-only kernel (sums) and a write-only kernel (fills) over " + MiB(kMax) +
              " MiB, float4 per thread, " + std::to_string(Blocks()) + " x " + std::to_string(kThreads) +
              " threads (median of " + std::to_string(g_reps) + ")",
          {"memory", "read ms", "read GB/s", "write ms", "write GB/s"});
  auto row = [&](const std::string& name, void* p) {
    const Bandwidth b = KernelBandwidth(p, kMax);
    t.Add({name, F(b.read_ms, 3), F(GBps(kMax, b.read_ms)), F(b.write_ms, 3), F(GBps(kMax, b.write_ms))});
  };
  row("device (cudaMalloc)", buf.dev[0]);
  {
    const Mapping m = Map(device, kMax);
    row("device (VMM, cuMemCreate)", reinterpret_cast<void*>(m.va));
    Unmap(m);
  }
  void* mapped = nullptr;
  CHECK(cudaHostGetDevicePointer(&mapped, buf.pinned[0], 0));
  row("host, pinned (cudaMallocHost, zero-copy)", mapped);
  if (host.ok) {
    const Mapping m = Map(host, kMax);
    row("host (VMM, cuMemCreate " + host.name + ")", reinterpret_cast<void*>(m.va));
    Unmap(m);
  } else {
    t.Add({"host (VMM)", "skipped"});
  }
  t.Print();
}

// ---- 6: a copy whose source is managed memory resident on the device -----------------------------------------

void ManagedSource(const Buffers& buf) {
  size_t free = 0, total = 0;
  CHECK(cudaMemGetInfo(&free, &total));
  const size_t margin = 512 * kMiB;
  size_t bytes = kMax;
  while (bytes > 2 * kMiB && bytes + margin > free) bytes /= 2;
  Table t("cudaMemcpyAsync to pinned host memory from managed memory prefetched to the device, against a cudaMalloc "
              "buffer; a memory-bound kernel pass over the source before and after the copy (median of " +
              std::to_string(g_reps) + ")",
          {"source", "size MiB", "copy ms", "copy GB/s", "kernel before ms", "kernel after ms", "after x before",
           "device free change MiB"});
  if (bytes + margin > free) {
    t.Note("skipped: " + MiB(free) + " MiB free on the device");
    t.Print();
    return;
  }
  char* managed = nullptr;
  CHECK(cudaMallocManaged(&managed, bytes));
  CHECK(cudaMemset(managed, 0, bytes));
  cudaMemLocation on_device{};
  on_device.type = cudaMemLocationTypeDevice;
  on_device.id = g_dev;
  for (bool is_managed : {false, true}) {
    char* src = is_managed ? managed : buf.dev[1];
    float4* p = reinterpret_cast<float4*>(src);
    const size_t n = bytes / sizeof(float4);
    std::vector<double> copy, before, after, change;
    for (int r = 0; r < g_reps; ++r) {
      if (is_managed) CHECK(cudaMemPrefetchAsync(src, bytes, on_device, 0, g_s1));
      CHECK(cudaDeviceSynchronize());
      before.push_back(KernelMs(p, n, 1));
      size_t free0 = 0, free1 = 0;
      CHECK(cudaMemGetInfo(&free0, &total));
      CHECK(cudaEventRecord(g_ev[2], g_s1));
      CHECK(cudaMemcpyAsync(buf.pinned[1], src, bytes, cudaMemcpyDeviceToHost, g_s1));
      CHECK(cudaEventRecord(g_ev[3], g_s1));
      CHECK(cudaStreamSynchronize(g_s1));
      CHECK(cudaMemGetInfo(&free1, &total));
      copy.push_back(Ms(g_ev[2], g_ev[3]));
      change.push_back((static_cast<double>(free1) - static_cast<double>(free0)) / kMiB);
      after.push_back(KernelMs(p, n, 1));
    }
    const double b = Median(before), a = Median(after), c = Median(copy);
    t.Add({is_managed ? "managed, prefetched to the device" : "cudaMalloc", MiB(bytes), F(c, 3), F(GBps(bytes, c)),
           F(b, 3), F(a, 3), F(b > 0 ? a / b : 0, 2), F(Median(change), 1)});
  }
  CHECK(cudaFree(managed));
  t.Note("after x before well above 1: the copy moved the pages off the device and the kernel faulted them back");
  t.Print();
}

// ---- 7: host cost of a launch and of the stream calls the executor makes --------------------------------------

void CallCosts(const Buffers& buf) {
  const int calls = g_quick ? 200 : 1000;
  const int batch = 100;  // synchronized (untimed) every `batch` calls: the stream never fills
  Table t("Host time per call, each timed alone, stream synchronized every " + std::to_string(batch) +
              " calls; device time per call from events around " + std::to_string(calls) + " calls queued behind a "
              "kernel that holds the stream 20 us per call",
          {"call", "calls", "host us median", "host us p90", "host us max", "device us per call"});
  cudaEvent_t ev = nullptr;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  auto host_times = [&](const char* name, const auto& call) {
    std::vector<double> us;
    call();
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < calls; ++i) {
      const auto t0 = Clock::now();
      call();
      us.push_back(Us(t0, Clock::now()));
      if ((i + 1) % batch == 0) CHECK(cudaDeviceSynchronize());
    }
    CHECK(cudaDeviceSynchronize());
    return std::vector<std::string>{name, std::to_string(calls), F(Median(us), 2), F(Quantile(us, 0.9), 2),
                                    F(Max(us), 1)};
  };
  bool late = false;
  auto device_us = [&](const auto& call) {
    const double hold_us = 20.0 * calls;
    CHECK(cudaDeviceSynchronize());
    Spin<<<1, 1, 0, g_s1>>>(static_cast<unsigned long long>(hold_us * 1000));
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(g_ev[0], g_s1));
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) call();
    CHECK(cudaEventRecord(g_ev[1], g_s1));
    const bool host_bound = Us(t0, Clock::now()) > hold_us;  // the GPU may have waited for the host
    late = late || host_bound;
    CHECK(cudaDeviceSynchronize());
    return F(Ms(g_ev[0], g_ev[1]) * 1000 / calls, 2) + (host_bound ? " *" : "");
  };
  auto launch = [] {
    Empty<<<1, 32, 0, g_s1>>>();
    CHECK(cudaGetLastError());
  };
  auto copy = [&] { CHECK(cudaMemcpyAsync(buf.dev[0], buf.pinned[0], 4096, cudaMemcpyHostToDevice, g_s1)); };
  std::vector<std::string> row = host_times("<<<>>> empty kernel (1 x 32 threads)", launch);
  row.push_back(device_us(launch));
  t.Add(row);
  t.Add(host_times("cudaEventRecord (timing disabled)", [&] { CHECK(cudaEventRecord(ev, g_s1)); }));
  CHECK(cudaEventRecord(ev, g_s1));
  t.Add(host_times("cudaStreamWaitEvent (other stream's event)", [&] { CHECK(cudaStreamWaitEvent(g_s2, ev, 0)); }));
  row = host_times("cudaMemcpyAsync 4 KiB pinned to device", copy);
  row.push_back(device_us(copy));
  t.Add(row);
  CHECK(cudaEventDestroy(ev));
  if (late) t.Note("*: queueing the calls took longer than the kernel held the stream: the host's rate, not the GPU's");
  t.Print();
}

// ---- 9: stream memory operations ---------------------------------------------------------------------------------

// Spins until the host sees `value` at `flag`; false after a second.
bool SeeValue(volatile unsigned* flag, unsigned value) {
  const auto t0 = Clock::now();
  while (*flag != value) {
    if (Clock::now() - t0 > std::chrono::seconds(1)) return false;
  }
  return true;
}

void StreamMemOps() {
  Table t("Stream memory operations on pinned host flags: cuStreamWriteValue32 and a kernel's store seen by the "
          "host; cuStreamWaitValue32 released by a host store " + std::string(g_quick ? "1" : "2") +
              " ms after the wait was queued (median of " + std::to_string(g_reps * 2) + ")",
          {"case", "calls us", "latency us median", "latency us max", "wait held"});
  unsigned* flags = nullptr;
  CHECK(cudaHostAlloc(&flags, 64, cudaHostAllocMapped));
  std::memset(flags, 0, 64);
  void* dflags = nullptr;
  CHECK(cudaHostGetDevicePointer(&dflags, flags, 0));
  volatile unsigned* gate = flags;       // the host writes, the stream waits
  volatile unsigned* seen = flags + 16;  // the stream writes, the host waits (another cache line)
  const CUdeviceptr dgate = reinterpret_cast<CUdeviceptr>(dflags);
  const CUdeviceptr dseen = dgate + 16 * sizeof(unsigned);
  CUstream s = reinterpret_cast<CUstream>(g_s1);
  unsigned value = 0;
  const int reps = g_reps * 2;
  const auto delay = std::chrono::milliseconds(g_quick ? 1 : 2);
  auto lost = [](const char* what) {
    std::fprintf(stderr, "move_costs: %s: the value was not seen within 1 s\n", what);
    std::fflush(stdout);
    std::_Exit(1);  // a stream may still wait: skip the runtime's teardown
  };

  // Is it supported at all?
  const CUresult probe = cuStreamWriteValue32(s, dseen, ++value, 0);
  if (probe != CUDA_SUCCESS) {
    t.Note(std::string("skipped: cuStreamWriteValue32 refused: ") + CuName(probe));
    t.Print();
    CHECK(cudaFreeHost(flags));
    return;
  }
  if (!SeeValue(seen, value)) lost("cuStreamWriteValue32");

  // On an idle stream: from the call to the host seeing the value.
  std::vector<double> call, latency;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaStreamSynchronize(g_s1));
    const auto t0 = Clock::now();
    CU_CHECK(cuStreamWriteValue32(s, dseen, ++value, 0));
    const auto t1 = Clock::now();
    if (!SeeValue(seen, value)) lost("cuStreamWriteValue32");
    call.push_back(Us(t0, t1));
    latency.push_back(Us(t0, Clock::now()));
  }
  t.Add({"cuStreamWriteValue32, idle stream: call to host sees it", F(Median(call), 2), F(Median(latency), 2),
         F(Max(latency), 2), "-"});
  call.clear();
  latency.clear();
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaStreamSynchronize(g_s1));
    const auto t0 = Clock::now();
    Signal<<<1, 1, 0, g_s1>>>(reinterpret_cast<volatile unsigned*>(dseen), ++value);
    const auto t1 = Clock::now();
    CHECK(cudaGetLastError());
    if (!SeeValue(seen, value)) lost("a kernel's store");
    call.push_back(Us(t0, t1));
    latency.push_back(Us(t0, Clock::now()));
  }
  t.Add({"kernel storing a flag, idle stream: launch to host sees it", F(Median(call), 2), F(Median(latency), 2),
         F(Max(latency), 2), "-"});

  // Queued behind a wait: the host's store to the gate, then the stream's store seen back.
  for (bool kernel : {false, true}) {
    call.clear();
    latency.clear();
    int held = 0;
    for (int r = 0; r < reps; ++r) {
      CHECK(cudaStreamSynchronize(g_s1));
      ++value;
      const auto t0 = Clock::now();
      const CUresult w = cuStreamWaitValue32(s, dgate, value, CU_STREAM_WAIT_VALUE_GEQ);
      if (w != CUDA_SUCCESS && r == 0) {
        t.Note("cuStreamWaitValue32 refused: " + CuName(w));
        break;
      }
      CU_CHECK(w);
      if (kernel) {
        Signal<<<1, 1, 0, g_s1>>>(reinterpret_cast<volatile unsigned*>(dseen), value);
        CHECK(cudaGetLastError());
      } else {
        CU_CHECK(cuStreamWriteValue32(s, dseen, value, 0));
      }
      const auto t1 = Clock::now();
      std::this_thread::sleep_for(delay);
      if (*seen != value) ++held;
      const auto t2 = Clock::now();
      *gate = value;
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!SeeValue(seen, value)) lost("cuStreamWaitValue32");
      call.push_back(Us(t0, t1));
      latency.push_back(Us(t2, Clock::now()));
    }
    if (latency.empty()) break;
    t.Add({kernel ? "cuStreamWaitValue32 + kernel storing a flag: host store to seen"
                  : "cuStreamWaitValue32 + cuStreamWriteValue32: host store to seen",
           F(Median(call), 2), F(Median(latency), 2), F(Max(latency), 2), Count(held, reps)});
  }
  CHECK(cudaStreamSynchronize(g_s1));
  CHECK(cudaFreeHost(flags));
  t.Note("calls us: the host time of the calls that queue the case; wait held: the stream's store had not landed "
         "before the host's");
  t.Print();
}

void Usage(std::FILE* to) {
  std::fprintf(to,
               "usage: move_costs [--quick] [--reps R]\n"
               "  what copies, CUDA's VMM calls and launches cost on this GPU (tests/gpu/README.md)\n"
               "  --quick   3 repetitions and fewer calls\n"
               "  --reps R  repetitions per figure (median), default 5\n");
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      g_quick = true;
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
      if (reps <= 0 || reps > 1000) {
        std::fprintf(stderr, "move_costs: --reps must be 1 to 1000\n");
        return 2;
      }
    } else if (a == "-h" || a == "--help") {
      Usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "move_costs: unknown argument %s\n", a.c_str());
      Usage(stderr);
      return 2;
    }
  }
  g_reps = reps > 0 ? reps : g_quick ? 3 : 5;
  const auto start = Clock::now();
  CU_CHECK(cuInit(0));
  CHECK(cudaGetDevice(&g_dev));
  CHECK(cudaSetDevice(g_dev));
  CHECK(cudaFree(nullptr));  // the primary context, current for the driver API calls too
  CU_CHECK(cuDeviceGet(&g_cudev, g_dev));
  CHECK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, g_dev));
  std::printf("move_costs: median of %d repetitions%s\n", g_reps, g_quick ? " (--quick)" : "");
  const int numa = DeviceTable();

  CHECK(cudaStreamCreateWithFlags(&g_s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&g_s2, cudaStreamNonBlocking));
  for (cudaEvent_t& e : g_ev) CHECK(cudaEventCreate(&e));
  CHECK(cudaMalloc(&g_sums, size_t{static_cast<unsigned>(Blocks())} * kThreads * sizeof(float)));
  Buffers buf;
  for (int i = 0; i < 2; ++i) {
    CHECK(cudaMalloc(&buf.dev[i], kMax));
    CHECK(cudaMemset(buf.dev[i], 0, kMax));
    CHECK(cudaMallocHost(&buf.pinned[i], kMax));
    std::memset(buf.pinned[i], 0, kMax);
  }
  std::unique_ptr<char[]> pageable(new char[kMax]);
  std::memset(pageable.get(), 1, kMax);  // the pages exist before the copies
  buf.pageable = pageable.get();
  CHECK(cudaDeviceSynchronize());

  PinnedCopies(buf);
  PageableCopies(buf);
  const auto [device, host] = Granularities(numa);
  VmmCalls(device, host);
  VmmSpans(device, host);
  VmmThreads(device);
  RemapDuringKernel(buf.dev[0], device, host);
  MappedBandwidth(buf, device, host);
  ManagedSource(buf);
  CallCosts(buf);
  StreamMemOps();

  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < 2; ++i) {
    CHECK(cudaFree(buf.dev[i]));
    CHECK(cudaFreeHost(buf.pinned[i]));
  }
  CHECK(cudaFree(g_sums));
  for (cudaEvent_t e : g_ev) CHECK(cudaEventDestroy(e));
  CHECK(cudaStreamDestroy(g_s1));
  CHECK(cudaStreamDestroy(g_s2));
  std::printf("\nmove_costs: done in %.1f s\n", Us(start, Clock::now()) / 1e6);
  return 0;
}
