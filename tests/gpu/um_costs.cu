// um_costs: what the managed-memory calls libkarma.so's executor makes cost on this GPU, and what they do to a
// kernel that touches the memory afterwards or runs meanwhile. simcuda charges a discard or a populating prefetch
// almost nothing; this measures the real figures (tests/gpu/README.md, docs/gpu-results.md).
//
//   um_costs [--blocks N] [--reps R]     N 2 MiB blocks per set (default 64: 128 MiB), R repetitions (median)
//
// Each case prints the host time its memory calls took to return, the device time of those calls (events around
// them on their stream), and the time of one pass of a memory-bound kernel over the set afterwards (or, for the
// "meanwhile" cases, of 10 passes over a resident set while the calls run on a second stream).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#define CHECK(x)                                                                                    \
  do {                                                                                              \
    cudaError_t e_ = (x);                                                                           \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "um_costs: %s failed: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

namespace {

constexpr size_t kBlock = size_t{2} << 20;

__global__ void Touch(float* p, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    p[i] = p[i] * 1.0001f + 1.0f;
  }
}

// Reads every element (a sum per thread into `out`): pages stay clean, so read-duplicated copies stay duplicated.
__global__ void Read(const float* p, size_t n, float* out) {
  float sum = 0;
  const size_t t = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  for (size_t i = t; i < n; i += size_t{gridDim.x} * blockDim.x) sum += p[i];
  out[t] = sum;
}

int g_device = 0;
int g_sms = 1;

cudaMemLocation Where(bool device) {
  cudaMemLocation l{};
  l.type = device ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
  l.id = device ? g_device : 0;
  return l;
}

struct Set {
  std::vector<void*> ptrs;
  std::vector<size_t> sizes;
  float* base = nullptr;
  size_t bytes = 0;
};

Set Blocks(float* base, size_t n) {
  Set s;
  s.base = base;
  s.bytes = n * kBlock;
  for (size_t i = 0; i < n; ++i) {
    s.ptrs.push_back(reinterpret_cast<char*>(base) + i * kBlock);
    s.sizes.push_back(kBlock);
  }
  return s;
}

void Kernel(const Set& s, cudaStream_t st, int passes = 1) {
  for (int i = 0; i < passes; ++i) Touch<<<g_sms * 8, 256, 0, st>>>(s.base, s.bytes / sizeof(float));
  CHECK(cudaGetLastError());
}

// The calls, as the executor makes them.
void PrefetchBatch(Set& s, bool device, cudaStream_t st) {
  cudaMemLocation loc = Where(device);
  size_t first = 0;
  CHECK(cudaMemPrefetchBatchAsync(s.ptrs.data(), s.sizes.data(), s.ptrs.size(), &loc, &first, 1, 0, st));
}
void PrefetchEach(Set& s, bool device, cudaStream_t st) {
  for (size_t i = 0; i < s.ptrs.size(); ++i) CHECK(cudaMemPrefetchAsync(s.ptrs[i], s.sizes[i], Where(device), 0, st));
}
void DiscardBatch(Set& s, cudaStream_t st) {
  CHECK(cudaMemDiscardBatchAsync(s.ptrs.data(), s.sizes.data(), s.ptrs.size(), 0, st));
}
void DiscardPrefetchBatch(Set& s, cudaStream_t st) {
  cudaMemLocation loc = Where(true);
  size_t first = 0;
  CHECK(cudaMemDiscardAndPrefetchBatchAsync(s.ptrs.data(), s.sizes.data(), s.ptrs.size(), &loc, &first, 1, 0, st));
}

struct Figures {
  double host_us = 0, op_ms = 0, kernel_ms = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Bench {
  cudaStream_t app = nullptr, aux = nullptr;
  cudaEvent_t e0, e1, e2, e3;
  int reps = 5;

  Bench() {
    CHECK(cudaStreamCreateWithFlags(&app, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&aux, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&e0, &e1, &e2, &e3}) CHECK(cudaEventCreate(e));
  }

  // setup: brings the memory to the case's starting state (synchronized); ops: the calls measured (host time, and
  // device time on `app`); then one kernel pass over `target` on `app`.
  Figures After(const std::function<void()>& setup, const std::function<void()>& ops, const Set& target) {
    return Repeat(setup, [&] {
      CHECK(cudaEventRecord(e0, app));
      const double us = HostMicros(ops);
      CHECK(cudaEventRecord(e1, app));
      Kernel(target, app);
      CHECK(cudaEventRecord(e2, app));
      return us;
    }, {e0, e1}, {e1, e2});
  }

  // 10 kernel passes over `target` (resident) on `app` while `ops` run on `aux`; op_ms is aux's time for them.
  Figures Meanwhile(const std::function<void()>& setup, const std::function<void()>& ops, const Set& target) {
    return Repeat(setup, [&] {
      CHECK(cudaEventRecord(e0, app));
      CHECK(cudaEventRecord(e2, aux));
      Kernel(target, app, 10);
      CHECK(cudaEventRecord(e1, app));
      const double us = HostMicros(ops);
      CHECK(cudaEventRecord(e3, aux));
      return us;
    }, {e2, e3}, {e0, e1});
  }

  using Span = std::pair<cudaEvent_t, cudaEvent_t>;
  static double HostMicros(const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  // `reps` times: setup, synchronize, `issue` (which returns the host time of the calls it measures), synchronize;
  // the medians of that host time and of the device times between the events of `calls` and of `kernel`.
  Figures Repeat(const std::function<void()>& setup, const std::function<double()>& issue, Span calls, Span kernel) {
    std::vector<double> host, op, kern;
    for (int r = 0; r < reps; ++r) {
      setup();
      CHECK(cudaDeviceSynchronize());
      host.push_back(issue());
      CHECK(cudaDeviceSynchronize());
      op.push_back(Ms(calls));
      kern.push_back(Ms(kernel));
    }
    return {Median(host), Median(op), Median(kern)};
  }

 private:
  static double Ms(const Span& s) {
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, s.first, s.second));
    return ms;
  }
};

// Read-duplicated pages (cudaMemAdviseSetReadMostly): a prefetch to the device of a set whose host copy is current
// leaves that copy valid. Whether the device's copy can then be dropped without writing it back, and what the calls
// and a later writing kernel cost, against evicting a copy the device wrote. Per case: set x up (synchronized),
// then the calls (host time; device time between events on `app`), the device memory they released
// (cudaMemGetInfo, synchronized), then one writing kernel pass over x; and, in one more untimed run, whether x's
// contents survived the calls (a checksum by a reading kernel before them and after them).
struct DupFigures {
  double host_us = 0, op_ms = 0, released_mib = 0, kernel_ms = 0;
  bool intact = true;
};

class DupBench {
 public:
  DupBench(Bench& b, Set& x) : b_(b), x_(x), threads_(size_t{static_cast<unsigned>(g_sms)} * 8 * 256) {
    CHECK(cudaMalloc(&sums_, threads_ * sizeof(float)));
    host_.resize(threads_);
  }
  ~DupBench() { cudaFree(sums_); }

  // x written on the device, evicted (its host copy current), marked read-mostly and prefetched back: a read-only
  // copy on each side.
  void Duplicated() {
    Clean();
    Dirty();
    Advise(cudaMemAdviseSetReadMostly, true);
    PrefetchBatch(x_, false, b_.app);
    PrefetchBatch(x_, true, b_.app);
    ReadPass();
  }
  // x written on the device, no advice: the device holds the only current copy.
  void Dirty() {
    Clean();
    PrefetchBatch(x_, true, b_.app);
    Kernel(x_, b_.app);
  }
  // x on the host only, then marked read-mostly.
  void OnHostReadMostly() {
    Dirty();
    PrefetchBatch(x_, false, b_.app);
    Advise(cudaMemAdviseSetReadMostly, true);
  }
  void Advise(cudaMemoryAdvise advice, bool device) { CHECK(cudaMemAdvise(x_.base, x_.bytes, advice, Where(device))); }

  DupFigures Run(const std::function<void()>& setup, const std::function<void()>& ops) {
    std::vector<double> released;
    const Figures t = b_.Repeat(setup, [&] {
      const size_t free0 = FreeBytes();
      CHECK(cudaEventRecord(b_.e0, b_.app));
      const double us = Bench::HostMicros(ops);
      CHECK(cudaEventRecord(b_.e1, b_.app));
      CHECK(cudaDeviceSynchronize());
      released.push_back((static_cast<double>(FreeBytes()) - static_cast<double>(free0)) / (1 << 20));
      CHECK(cudaEventRecord(b_.e2, b_.app));
      Kernel(x_, b_.app);
      CHECK(cudaEventRecord(b_.e3, b_.app));
      return us;
    }, {b_.e0, b_.e1}, {b_.e2, b_.e3});
    DupFigures f{t.host_us, t.op_ms, Median(released), t.kernel_ms, true};
    // Once more, untimed: the contents before the calls and after them (a reading pass moves pages, so it is kept
    // out of the timed runs).
    setup();
    const std::vector<float> before = Checksum();
    ops();
    f.intact = Checksum() == before;
    Clean();
    return f;
  }

 private:
  // No advice left on x.
  void Clean() {
    CHECK(cudaDeviceSynchronize());
    Advise(cudaMemAdviseUnsetReadMostly, true);
    Advise(cudaMemAdviseUnsetPreferredLocation, true);
  }
  void ReadPass() {
    Read<<<g_sms * 8, 256, 0, b_.app>>>(x_.base, x_.bytes / sizeof(float), sums_);
    CHECK(cudaGetLastError());
  }
  std::vector<float> Checksum() {
    ReadPass();
    CHECK(cudaMemcpyAsync(host_.data(), sums_, threads_ * sizeof(float), cudaMemcpyDeviceToHost, b_.app));
    CHECK(cudaStreamSynchronize(b_.app));
    return host_;
  }
  static size_t FreeBytes() {
    size_t free = 0, total = 0;
    CHECK(cudaMemGetInfo(&free, &total));
    return free;
  }

  Bench& b_;
  Set& x_;
  size_t threads_;
  float* sums_ = nullptr;
  std::vector<float> host_;
};

void DupRow(const char* name, const DupFigures& f, double resident_ms) {
  std::printf("| %-62s | %9.1f | %8.3f | %8.1f | %8.3f | %6.2f | %s |\n", name, f.host_us, f.op_ms, f.released_mib,
              f.kernel_ms, resident_ms > 0 ? f.kernel_ms / resident_ms : 0.0, f.intact ? "yes" : "NO");
}

void Row(const char* name, size_t calls, const Figures& f, double resident_ms) {
  std::printf("| %-58s | %5zu | %9.1f | %8.3f | %8.3f | %6.2f |\n", name, calls, f.host_us, f.op_ms, f.kernel_ms,
              resident_ms > 0 ? f.kernel_ms / resident_ms : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 64;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--blocks" && i + 1 < argc) {
      n = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: um_costs [--blocks N] [--reps R]\n");
      return 2;
    }
  }
  if (n == 0 || reps <= 0) {
    std::fprintf(stderr, "um_costs: --blocks and --reps must be positive\n");
    return 2;
  }
  CHECK(cudaGetDevice(&g_device));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, g_device));
  g_sms = prop.multiProcessorCount;
  int cma = 0;
  CHECK(cudaDeviceGetAttribute(&cma, cudaDevAttrConcurrentManagedAccess, g_device));
  std::printf("um_costs: %s, %d SMs, concurrentManagedAccess %d; sets of %zu blocks of 2 MiB (%zu MiB), median of %d\n",
              prop.name, g_sms, cma, n, n * 2, reps);

  float* plain = nullptr;
  float* managed = nullptr;
  CHECK(cudaMalloc(&plain, n * kBlock));
  CHECK(cudaMemset(plain, 0, n * kBlock));
  CHECK(cudaMallocManaged(&managed, 2 * n * kBlock));
  CHECK(cudaMemset(managed, 0, 2 * n * kBlock));
  Set dev = Blocks(plain, n), x = Blocks(managed, n), y = Blocks(managed + n * kBlock / sizeof(float), n);
  Bench b;
  b.reps = reps;
  auto nothing = [] {};
  auto resident = [&] {
    PrefetchBatch(x, true, b.app);
    PrefetchBatch(y, true, b.app);
  };
  auto x_on_host = [&] {
    PrefetchBatch(y, true, b.app);
    PrefetchBatch(x, false, b.app);
  };
  auto y_on_host = [&] {
    PrefetchBatch(x, true, b.app);
    PrefetchBatch(y, false, b.app);
  };

  std::printf("\n| case | calls | host us | calls ms | kernel ms | x resident |\n|---|---|---|---|---|---|\n");
  Figures base = b.After(nothing, nothing, dev);
  Row("cudaMalloc memory", 0, base, 0);
  Figures res = b.After(resident, nothing, x);
  const double r = res.kernel_ms;
  Row("managed, resident on the device", 0, res, r);
  Row("discarded (one batch call), then the kernel: first touch", 1,
      b.After(resident, [&] { DiscardBatch(x, b.app); }, x), r);
  Row("discard batch + prefetch batch to the device, then kernel", 2, b.After(resident, [&] {
        DiscardBatch(x, b.app);
        PrefetchBatch(x, true, b.app);
      }, x), r);
  Row("discard batch + prefetch batch, kernel, then a 2nd kernel", 0, b.After([&] {
        resident();
        DiscardBatch(x, b.app);
        PrefetchBatch(x, true, b.app);
        Kernel(x, b.app);
      }, nothing, x), r);
  Row("discard batch, synchronize, prefetch batch, then kernel", 1, b.After([&] {
        resident();
        DiscardBatch(x, b.app);
      }, [&] { PrefetchBatch(x, true, b.app); }, x), r);
  Row("discard batch + one prefetch per block, then kernel", 1 + n, b.After(resident, [&] {
        DiscardBatch(x, b.app);
        PrefetchEach(x, true, b.app);
      }, x), r);
  Row("one discard per block + prefetch batch, then kernel", n + 1, b.After(resident, [&] {
        for (size_t i = 0; i < n; ++i) CHECK(cudaMemDiscardBatchAsync(&x.ptrs[i], &x.sizes[i], 1, 0, b.app));
        PrefetchBatch(x, true, b.app);
      }, x), r);
  Row("resident, prefetch batch to the device (nothing to move)", 1,
      b.After(resident, [&] { PrefetchBatch(x, true, b.app); }, x), r);
  {
    float* fresh_base = nullptr;
    Set fresh;
    auto allocate = [&] {
      if (fresh_base != nullptr) CHECK(cudaFree(fresh_base));
      CHECK(cudaMallocManaged(&fresh_base, n * kBlock));
      fresh = Blocks(fresh_base, n);
    };
    Row("never touched, prefetch batch to the device, then kernel", 1,
        b.After(allocate, [&] { PrefetchBatch(fresh, true, b.app); }, fresh), r);
    Row("never touched, no prefetch: first touch", 0, b.After(allocate, nothing, fresh), r);
    CHECK(cudaFree(fresh_base));
  }
  Row("cudaMemDiscardAndPrefetchBatchAsync, then kernel", 1,
      b.After(resident, [&] { DiscardPrefetchBatch(x, b.app); }, x), r);
  Row("on the host, no prefetch: the kernel faults it over", 0, b.After(x_on_host, nothing, x), r);
  Row("on the host, prefetch batch to the device, then kernel", 1,
      b.After(x_on_host, [&] { PrefetchBatch(x, true, b.app); }, x), r);
  Row("on the host, one prefetch per block, then kernel", n,
      b.After(x_on_host, [&] { PrefetchEach(x, true, b.app); }, x), r);
  Row("resident, evict batch to the host (then kernel faults back)", 1,
      b.After(resident, [&] { PrefetchBatch(x, false, b.app); }, x), r);
  Row("resident, one eviction per block (then kernel faults back)", n,
      b.After(resident, [&] { PrefetchEach(x, false, b.app); }, x), r);
  // The executor on a free: event app->aux, discard on aux, event aux->app; on the next allocation of the block a
  // prefetch to the device on the application's stream.
  std::vector<cudaEvent_t> evs(2 * n);
  for (auto& e : evs) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  Row("per block: event, discard on 2nd stream, event, prefetch; kernel", 5 * n, b.After(resident, [&] {
        for (size_t i = 0; i < n; ++i) {
          CHECK(cudaEventRecord(evs[2 * i], b.app));
          CHECK(cudaStreamWaitEvent(b.aux, evs[2 * i], 0));
          CHECK(cudaMemDiscardBatchAsync(&x.ptrs[i], &x.sizes[i], 1, 0, b.aux));
          CHECK(cudaEventRecord(evs[2 * i + 1], b.aux));
          CHECK(cudaStreamWaitEvent(b.app, evs[2 * i + 1], 0));
        }
        PrefetchEach(x, true, b.app);
      }, x), r);

  std::printf("\n10 kernel passes over a resident set on one stream while another stream works on a second set:\n\n"
              "| case | calls | host us | calls ms | 10 passes ms | x alone |\n|---|---|---|---|---|---|\n");
  Figures alone = b.Meanwhile(resident, nothing, x);
  const double a = alone.kernel_ms;
  Row("nothing meanwhile", 0, alone, a);
  Row("meanwhile: discard batch + prefetch batch of the other set", 2, b.Meanwhile(resident, [&] {
        DiscardBatch(y, b.aux);
        PrefetchBatch(y, true, b.aux);
      }, x), a);
  Row("meanwhile: per block discard + prefetch of the other set", 2 * n, b.Meanwhile(resident, [&] {
        for (size_t i = 0; i < n; ++i) {
          CHECK(cudaMemDiscardBatchAsync(&y.ptrs[i], &y.sizes[i], 1, 0, b.aux));
          CHECK(cudaMemPrefetchAsync(y.ptrs[i], y.sizes[i], Where(true), 0, b.aux));
        }
      }, x), a);
  Row("meanwhile: evict the other set (batch)", 1, b.Meanwhile(resident, [&] { PrefetchBatch(y, false, b.aux); }, x),
      a);
  Row("meanwhile: evict the other set, one call per block", n,
      b.Meanwhile(resident, [&] { PrefetchEach(y, false, b.aux); }, x), a);
  Row("meanwhile: prefetch the other set from the host (batch)", 1,
      b.Meanwhile(y_on_host, [&] { PrefetchBatch(y, true, b.aux); }, x), a);
  Row("meanwhile: prefetch the other set from the host, one call per block", n,
      b.Meanwhile(y_on_host, [&] { PrefetchEach(y, true, b.aux); }, x), a);
  for (auto& e : evs) CHECK(cudaEventDestroy(e));

  std::printf("\nRead-duplicated copies (cudaMemAdviseSetReadMostly) against a copy the device wrote: the calls, the "
              "device memory they released, then one writing kernel pass over the set; contents intact:\n\n"
              "| case | host us | calls ms | released MiB | kernel ms | x resident | intact |\n"
              "|---|---|---|---|---|---|---|\n");
  {
    DupBench d(b, x);
    auto dirty = [&] { d.Dirty(); };
    auto dup = [&] { d.Duplicated(); };
    auto host_rm = [&] { d.OnHostReadMostly(); };
    auto evict = [&] { PrefetchBatch(x, false, b.app); };
    DupRow("written on the device: evict batch to the host (the write-back)", d.Run(dirty, evict), r);
    DupRow("on the host, read-mostly: prefetch batch (duplicates)", d.Run(host_rm, [&] {
             PrefetchBatch(x, true, b.app);
           }), r);
    DupRow("duplicated: nothing (the writing kernel collapses the copies)", d.Run(dup, nothing), r);
    DupRow("duplicated: evict batch to the host", d.Run(dup, evict), r);
    DupRow("duplicated: preferred location host, unset read-mostly", d.Run(dup, [&] {
             d.Advise(cudaMemAdviseSetPreferredLocation, false);
             d.Advise(cudaMemAdviseUnsetReadMostly, true);
           }), r);
    DupRow("duplicated: same, then unset preferred location", d.Run(dup, [&] {
             d.Advise(cudaMemAdviseSetPreferredLocation, false);
             d.Advise(cudaMemAdviseUnsetReadMostly, true);
             d.Advise(cudaMemAdviseUnsetPreferredLocation, true);
           }), r);
    DupRow("duplicated: unset read-mostly (no preferred location)", d.Run(dup, [&] {
             d.Advise(cudaMemAdviseUnsetReadMostly, true);
           }), r);
  }
  // Which streams the batch calls take (the executor avoids the legacy default stream for them).
  std::printf("\n");
  for (cudaStream_t st : {cudaStream_t{nullptr}, cudaStreamLegacy, cudaStreamPerThread, b.app}) {
    cudaMemLocation loc = Where(true);
    size_t first = 0;
    const cudaError_t pf = cudaMemPrefetchBatchAsync(x.ptrs.data(), x.sizes.data(), 2, &loc, &first, 1, 0, st);
    const cudaError_t dp = cudaMemDiscardAndPrefetchBatchAsync(x.ptrs.data(), x.sizes.data(), 2, &loc, &first, 1, 0, st);
    const cudaError_t d = cudaMemDiscardBatchAsync(x.ptrs.data(), x.sizes.data(), 2, 0, st);
    cudaGetLastError();
    std::printf("stream %-10s prefetch batch: %s, discard+prefetch batch: %s, discard batch: %s\n",
                st == nullptr ? "0" : st == cudaStreamLegacy ? "legacy" : st == cudaStreamPerThread ? "per-thread" : "created",
                cudaGetErrorName(pf), cudaGetErrorName(dp), cudaGetErrorName(d));
    CHECK(cudaDeviceSynchronize());
  }
  CHECK(cudaFree(managed));
  CHECK(cudaFree(plain));
  std::printf("\num_costs: done\n");
  return 0;
}
