// um_counters: a CUDA injection library (CUDA_INJECTION64_PATH=.../libum_counters.so) that counts unified-memory
// traffic with CUPTI's activity API: bytes moved host to device and back, GPU page-fault groups, CPU page faults,
// thrashing and throttling. It prints one line per second of the run (from the first record) and the totals at
// exit to stderr, or to UM_COUNTERS_OUT when set. Used to see which pages a replay's kernels wait for
// (tests/gpu/README.md).
#include <cupti.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

namespace {

constexpr size_t kBuffer = size_t{1} << 20;
constexpr std::array<CUpti_ActivityUnifiedMemoryCounterKind, 6> kKinds = {
    CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
    CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
    CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
    CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT,
    CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING,
    CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING,
};

struct Counts {
  uint64_t records[kKinds.size()] = {};
  uint64_t values[kKinds.size()] = {};
  uint64_t busy_ns[kKinds.size()] = {};  // sum of record durations (end - start)
};

std::mutex g_mu;
uint64_t g_first = 0;
std::map<uint64_t, Counts> g_seconds;  // second of the run -> counts
Counts g_total;
uint64_t g_dropped = 0;
bool g_printed = false;

int Slot(CUpti_ActivityUnifiedMemoryCounterKind k) {
  for (size_t i = 0; i < kKinds.size(); ++i) {
    if (kKinds[i] == k) return static_cast<int>(i);
  }
  return -1;
}

void CUPTIAPI Requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBuffer));
  *size = *buffer != nullptr ? kBuffer : 0;
  *max_records = 0;
}

void CUPTIAPI Completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mu);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER) continue;
    const auto* um = reinterpret_cast<const CUpti_ActivityUnifiedMemoryCounter3*>(record);
    const int s = Slot(um->counterKind);
    if (s < 0) continue;
    if (g_first == 0 || um->start < g_first) g_first = um->start;
    const uint64_t second = um->start >= g_first ? (um->start - g_first) / 1000000000u : 0;
    for (Counts* c : {&g_seconds[second], &g_total}) {
      c->records[s]++;
      c->values[s] += um->value;
      c->busy_ns[s] += um->end > um->start ? um->end - um->start : 0;
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
  std::free(buffer);
}

void Line(FILE* f, const char* label, const Counts& c) {
  constexpr double kMiB = 1024.0 * 1024.0;
  std::fprintf(f,
               "um_counters %-7s htod %9.1f MiB in %7.1f ms (%6lu) | dtoh %9.1f MiB in %7.1f ms (%6lu) | gpu faults "
               "%7lu (%6lu groups, %7.1f ms) | cpu faults %6lu | thrashing %lu | throttling %lu\n",
               label, c.values[0] / kMiB, c.busy_ns[0] / 1e6, static_cast<unsigned long>(c.records[0]),
               c.values[1] / kMiB, c.busy_ns[1] / 1e6, static_cast<unsigned long>(c.records[1]),
               static_cast<unsigned long>(c.values[2]), static_cast<unsigned long>(c.records[2]), c.busy_ns[2] / 1e6,
               static_cast<unsigned long>(c.values[3]), static_cast<unsigned long>(c.values[4]),
               static_cast<unsigned long>(c.values[5]));
}

void Print() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_printed) return;
  g_printed = true;
  FILE* f = stderr;
  const char* path = std::getenv("UM_COUNTERS_OUT");
  if (path != nullptr && *path != '\0') {
    if (FILE* o = std::fopen(path, "w")) f = o;
  }
  char label[32];
  for (const auto& [second, c] : g_seconds) {
    std::snprintf(label, sizeof label, "t=%lus", static_cast<unsigned long>(second));
    Line(f, label, c);
  }
  Line(f, "total", g_total);
  if (g_dropped != 0) std::fprintf(f, "um_counters: %lu records dropped\n", static_cast<unsigned long>(g_dropped));
  if (f != stderr) std::fclose(f);
}

bool Ok(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  std::fprintf(stderr, "um_counters: %s failed: %s\n", what, s != nullptr ? s : "?");
  return false;
}

// The counters can be enabled once a context exists (at cuInit CUPTI answers "not ready").
bool g_enabled = false;
CUpti_SubscriberHandle g_subscriber;

void Enable() {
  if (g_enabled) return;
  g_enabled = true;
  std::array<CUpti_ActivityUnifiedMemoryCounterConfig, kKinds.size()> config{};
  for (size_t i = 0; i < kKinds.size(); ++i) {
    config[i].scope = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE;
    config[i].kind = kKinds[i];
    config[i].deviceId = 0;
    config[i].enable = 1;
  }
  if (Ok(cuptiActivityConfigureUnifiedMemoryCounter(config.data(), config.size()),
         "cuptiActivityConfigureUnifiedMemoryCounter") &&
      Ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER), "cuptiActivityEnable")) {
    std::fprintf(stderr, "um_counters: counting unified-memory traffic\n");
  }
}

void CUPTIAPI OnResource(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void*) {
  if (domain == CUPTI_CB_DOMAIN_RESOURCE && id == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) Enable();
}

}  // namespace

// Called by the CUDA driver at cuInit when CUDA_INJECTION64_PATH names this library.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  if (!Ok(cuptiActivityRegisterCallbacks(Requested, Completed), "cuptiActivityRegisterCallbacks") ||
      !Ok(cuptiSubscribe(&g_subscriber, reinterpret_cast<CUpti_CallbackFunc>(OnResource), nullptr),
          "cuptiSubscribe") ||
      !Ok(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED),
          "cuptiEnableCallback")) {
    return 0;
  }
  cuptiActivityFlushPeriod(200);
  std::atexit(Print);
  return 1;
}
