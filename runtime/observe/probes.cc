// Hashing the allocations a kernel gets pointers into, before and after it, in the recorded iteration.
#include "runtime/observe/probes.h"

#include <cstring>

#include "ground/common/wall_time.h"

namespace karma::rt {
namespace {

// Pinned staging memory: allocations are hashed in pieces of this size.
constexpr uint64_t kChunk = 8ull << 20;

// One multiply-xorshift round per 8-byte word: each round is a bijection of the state for a given word, so two
// contents that differ in one word always hash differently.
uint64_t HashWords(const unsigned char* p, uint64_t n, uint64_t h) {
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  for (; n > 0; --n, ++p) h = (h ^ *p) * 0x100000001b3ull;
  return h;
}

}  // namespace

bool Probes::ReadyLocked() {
  if (staging_ != nullptr) return true;
  if (failed_ || api_.cudaMallocHost == nullptr || api_.cudaFreeHost == nullptr || api_.cudaMemcpyAsync == nullptr ||
      api_.cudaStreamCreateWithFlags == nullptr || api_.cudaStreamSynchronize == nullptr ||
      api_.cudaStreamWaitEvent == nullptr || api_.cudaEventCreateWithFlags == nullptr ||
      api_.cudaEventRecord == nullptr) {
    return false;
  }
  LastErrorScope errors(api_);
  if (api_.cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess ||
      api_.cudaEventCreateWithFlags(&event_, cudaEventDisableTiming) != cudaSuccess ||
      api_.cudaMallocHost(&staging_, kChunk) != cudaSuccess) {
    errors.Failed();
    staging_ = nullptr;
    failed_ = true;
    return false;
  }
  return true;
}

bool Probes::HashLocked(Recording& rec, uint64_t start, uint64_t bytes, cudaStream_t after, uint64_t* out) {
  LastErrorScope errors(api_);
  if (api_.cudaEventRecord(event_, after) != cudaSuccess ||
      api_.cudaStreamWaitEvent(stream_, event_, 0) != cudaSuccess) {
    errors.Failed();
    return false;
  }
  uint64_t h = bytes;
  for (uint64_t off = 0; off < bytes; off += kChunk) {
    const uint64_t n = std::min(kChunk, bytes - off);
    if (api_.cudaMemcpyAsync(staging_, reinterpret_cast<const void*>(start + off), n, cudaMemcpyDeviceToHost,
                             stream_) != cudaSuccess ||
        api_.cudaStreamSynchronize(stream_) != cudaSuccess) {
      errors.Failed();
      return false;
    }
    h = HashWords(static_cast<const unsigned char*>(staging_), n, h);
  }
  rec.probe_bytes += bytes;
  *out = h;
  return true;
}

void Probes::Before(Recording& rec, RecordedOp& op) {
  std::lock_guard<std::mutex> lock(mu_);
  AddWallNs<std::atomic<uint64_t>> timed(rec.probe_ns);
  const bool kernel = op.kind == trace::OpKind::kKernel;
  const bool ready = kernel && ReadyLocked();
  for (size_t i = 0; i < op.uses.size(); ++i) {
    RecordedUse& u = op.uses[i];
    RecordedBuffer& rb = rec.buffers.at(u.serial);
    const bool fresh = rb.allocated_inside && !rb.used;
    rb.used = true;
    const bool probed = std::any_of(op.probes.begin(), op.probes.end(),
                                    [&](const Probe& p) { return op.uses[p.use].serial == u.serial; });
    if (probed || u.access == Access::kRead) continue;
    const bool probe =
        ready && u.access == Access::kTouch && !fresh && rb.entry.size > 0 && rb.entry.size <= kMaxBytes;
    auto known = rec.hashes.find(u.serial);
    if (!probe) {  // written unseen, or written whole by its first use: its bytes are new
      if (known != rec.hashes.end()) rec.hashes.erase(known);
      continue;
    }
    Probe p{i, rb.entry.start, rb.entry.size, 0};
    if (known != rec.hashes.end()) {
      p.before = known->second;
    } else if (!HashLocked(rec, p.start, p.bytes, StreamOf(op.stream_key), &p.before)) {
      continue;
    }
    op.probes.push_back(p);
  }
}

void Probes::After(Recording& rec, RecordedOp& op) {
  std::lock_guard<std::mutex> lock(mu_);
  AddWallNs<std::atomic<uint64_t>> timed(rec.probe_ns);
  for (const Probe& p : op.probes) {
    RecordedUse& u = op.uses[p.use];
    uint64_t after = 0;
    if (staging_ == nullptr || !HashLocked(rec, p.start, p.bytes, StreamOf(op.stream_key), &after)) {
      rec.hashes.erase(u.serial);
      continue;
    }
    u.changed = after != p.before ? 1 : 0;
    rec.hashes[u.serial] = after;
  }
  op.probes.clear();
  op.probes.shrink_to_fit();
}

void Probes::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  LastErrorScope errors(api_);
  if (staging_ != nullptr && api_.cudaFreeHost != nullptr) api_.cudaFreeHost(staging_);
  if (event_ != nullptr && api_.cudaEventDestroy != nullptr) api_.cudaEventDestroy(event_);
  if (stream_ != nullptr && api_.cudaStreamDestroy != nullptr) api_.cudaStreamDestroy(stream_);
  staging_ = nullptr;
  event_ = nullptr;
  stream_ = nullptr;
  failed_ = false;
}

}  // namespace karma::rt
