// Turning a recorded iteration into the trace model.
#include "runtime/observe/recorder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <thread>

#include "runtime/base/streams.h"
#include "ground/trace/inference.h"

namespace karma::rt {
namespace {

// How long the worker waits for an op another thread issued but has not finished issuing.
constexpr auto kInflightWait = std::chrono::seconds(2);

Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return Status::Ok();
  std::string path;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    path = dir.substr(0, pos);
    if (path.empty()) continue;
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return IoError("cannot create directory " + path + ": " + std::strerror(errno));
    }
  }
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return IoError(dir + " is not a directory");
  return Status::Ok();
}

uint64_t DurationNs(const CudaApi& api, const RecordedOp& op) {
  if (op.start == nullptr || op.end == nullptr || api.cudaEventSynchronize == nullptr ||
      api.cudaEventElapsedTime == nullptr) {
    return 0;
  }
  LastErrorScope errors(api);
  float ms = 0;
  if (api.cudaEventSynchronize(op.end) != cudaSuccess || api.cudaEventElapsedTime(&ms, op.start, op.end) != cudaSuccess) {
    errors.Failed();
    return 0;
  }
  return ms > 0 ? static_cast<uint64_t>(std::llround(static_cast<double>(ms) * 1e6)) : 0;
}

void ReleaseEvents(const CudaApi& api, RecordedOp& op) {
  if (api.cudaEventDestroy == nullptr) return;
  if (op.start != nullptr) api.cudaEventDestroy(op.start);
  if (op.end != nullptr) api.cudaEventDestroy(op.end);
  op.start = op.end = nullptr;
}

}  // namespace

RecordedBuffer& Recording::Buffer(const BufferEntry& e) {
  auto [it, inserted] = buffers.try_emplace(e.serial);
  if (inserted) {
    it->second.entry = e;
    buffer_order.push_back(e.serial);
  }
  return it->second;
}

uint32_t Recording::StreamId(StreamKey key) {
  if (key == kSyncStream || key == 0) return 0;
  auto [it, inserted] = streams.try_emplace(key, static_cast<uint32_t>(streams.size() + 1));
  return it->second;
}

uint64_t Recording::NowNs() const {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}

void Recording::AddEvent(trace::EventKind kind, uint64_t serial) {
  events.push_back(RecordedEvent{kind, static_cast<uint32_t>(ops.size()), serial, NowNs()});
}

Result<std::string> TracePath(const std::string& dir, const std::string& program, int64_t pid) {
  KARMA_RETURN_IF_ERROR(MakeDirs(dir));
  std::string name = program.empty() ? "process" : program;
  std::replace(name.begin(), name.end(), '/', '_');
  return (dir.empty() ? std::string(".") : dir) + "/" + name + "-" + std::to_string(pid) + ".ktrace";
}

namespace {

// Allocator rounding: a write that ends this close to its allocation's end writes the whole allocation.
constexpr uint64_t kWholeSlack = 512;

// A write through an operand: the whole allocation (a value created without reading the old one), or part of it
// (the rest keeps what it held: the op also reads it). A kernel's pointer says nothing about its extent.
bool WritesWhole(const RecordedUse& u, trace::OpKind kind, uint64_t size) {
  if (u.gaps || u.offset != 0) return false;
  if (u.extent == 0) return kind == trace::OpKind::kLibrary;  // a library call writes the tensor it names
  return u.extent + kWholeSlack >= size;
}

// An op whose buffers were partly in host memory when it ran (RecordedOp::off_device) takes the median duration
// measured for the ops of its shape signature that ran on the device: identical layers of a model that does not fit
// are measured where their buffers were on the device, and the cost model's roofline, which knows nothing of a
// kernel's code, can be far off (it put a bias-and-activation kernel of the trainer apps 30 times too low).
// `off_device`: per op of `out`.
void LikeOpDurations(const std::vector<bool>& off_device, RecordedIteration& out) {
  std::unordered_map<uint64_t, std::vector<uint64_t>> measured;  // shape -> durations measured on the device
  for (size_t k = 0; k < out.ops.size(); ++k) {
    const uint64_t ns = out.it.ops[k].duration_ns;
    if (!off_device[k] && ns != 0) measured[out.ops[k].shape].push_back(ns);
  }
  for (auto& [shape, ns] : measured) std::nth_element(ns.begin(), ns.begin() + ns.size() / 2, ns.end());
  for (size_t k = 0; k < out.ops.size(); ++k) {
    if (!off_device[k]) continue;
    auto m = measured.find(out.ops[k].shape);
    if (m != measured.end()) out.it.ops[k].duration_ns = m->second[m->second.size() / 2];
  }
}

}  // namespace

Result<RecordedIteration> FinishRecording(Recording& rec, const CudaApi& api, const TraceContext& ctx) {
  // Ops issued by other threads may still be between their hook's bookkeeping and the real call's return.
  const auto deadline = std::chrono::steady_clock::now() + kInflightWait;
  for (RecordedOp& op : rec.ops) {
    while (op.state.load(std::memory_order_acquire) == RecordedOp::kPending &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  RecordedIteration out;
  trace::Iteration& it = out.it;
  it.model = ctx.model;
  it.source = ctx.source;
  out.allocations = rec.allocations;

  // Ops that failed (or never finished issuing) did not run: drop them and renumber.
  std::vector<uint32_t> new_index(rec.ops.size() + 1, 0);
  uint32_t kept = 0;
  for (size_t i = 0; i < rec.ops.size(); ++i) {
    new_index[i] = kept;
    if (rec.ops[i].state.load(std::memory_order_acquire) == RecordedOp::kDone) kept++;
  }
  new_index[rec.ops.size()] = kept;

  // One buffer per allocation, in order of first appearance.
  std::unordered_map<uint64_t, trace::BufferId> id_of;
  for (uint64_t serial : rec.buffer_order) {
    const RecordedBuffer& rb = rec.buffers.at(serial);
    trace::Buffer b;
    b.id = static_cast<trace::BufferId>(it.buffers.size());
    b.bytes = rb.entry.size;
    b.address = rb.entry.start;
    b.dtype = rb.dtype;
    if (ctx.sites != nullptr) b.site = ctx.sites->Describe(rb.entry.site);
    id_of[serial] = b.id;
    ReplayBuffer r;
    r.address = b.address;
    r.bytes = b.bytes;
    r.origin = rb.entry.origin;
    r.allocated_inside = rb.allocated_inside;
    r.alloc_ordinal = rb.alloc_ordinal;
    r.exact = rb.entry.origin == Origin::kArena && rb.allocated_inside && rb.freed_inside;
    out.buffers.push_back(r);
    it.buffers.push_back(std::move(b));
  }
  const size_t nbuf = it.buffers.size();

  std::vector<uint32_t> first_use(nbuf, trace::kNone), last_use(nbuf, trace::kNone);
  std::vector<bool> off_device;  // per op kept: some of its buffers were in host memory when it ran
  for (size_t i = 0; i < rec.ops.size(); ++i) {
    RecordedOp& rop = rec.ops[i];
    const bool done = rop.state.load(std::memory_order_acquire) == RecordedOp::kDone;
    if (!done) {
      ReleaseEvents(api, rop);
      continue;
    }
    trace::Op op;
    op.id = static_cast<trace::OpId>(it.ops.size());
    op.name = rop.name;
    op.kind = rop.kind;
    op.stream = rop.stream;
    op.flops = rop.flops;
    op.duration_ns = rop.off_device ? 0 : DurationNs(api, rop);
    off_device.push_back(rop.off_device);
    ReleaseEvents(api, rop);
    // One entry per buffer: directions of repeated operands combine. A probed kernel argument read the
    // allocation, or changed it (an update: it may keep some of the old bytes); an unprobed one touched it.
    std::map<trace::BufferId, uint8_t> dirs;
    for (const RecordedUse& u : rop.uses) {
      uint8_t bits = static_cast<uint8_t>(u.access);
      if (u.access == Access::kWrite && !WritesWhole(u, rop.kind, rec.buffers.at(u.serial).entry.size)) {
        bits = static_cast<uint8_t>(Access::kReadWrite);
      }
      if (u.access == Access::kTouch && u.changed >= 0) {
        bits = static_cast<uint8_t>(u.changed == 1 ? Access::kReadWrite : Access::kRead);
      }
      dirs[id_of.at(u.serial)] |= bits;
    }
    uint64_t buffer_bytes = 0;
    for (const auto& [id, bits] : dirs) {
      const bool r = bits & static_cast<uint8_t>(Access::kRead);
      const bool w = bits & static_cast<uint8_t>(Access::kWrite);
      if (r) op.reads.push_back(id);
      if (w) op.writes.push_back(id);
      if (!r && !w) op.touches.push_back(id);
      buffer_bytes += it.buffers[id].bytes;
      if (first_use[id] == trace::kNone) first_use[id] = op.id;
      last_use[id] = op.id;
    }
    op.bytes = rop.bytes != 0 ? rop.bytes : buffer_bytes;
    it.ops.push_back(std::move(op));
    out.ops.push_back(ReplayOp{rop.shape, rop.stream, rop.stream_key, rop.relaunch});
  }

  LikeOpDurations(off_device, out);

  // A kernel's pointer arguments do not say whether it reads or writes. An allocation made inside the iteration
  // holds nothing before its first use, so the first kernel that touches it writes it.
  for (size_t b = 0; b < nbuf; ++b) {
    if (!out.buffers[b].allocated_inside || first_use[b] == trace::kNone) continue;
    trace::Op& op = it.ops[first_use[b]];
    const auto id = static_cast<trace::BufferId>(b);
    auto t = std::find(op.touches.begin(), op.touches.end(), id);
    if (t == op.touches.end()) continue;
    op.touches.erase(t);
    op.writes.insert(std::upper_bound(op.writes.begin(), op.writes.end(), id), id);
  }

  // Kinds from what the recording shows (the API does not say what a buffer holds).
  for (uint64_t serial : rec.buffer_order) {
    const RecordedBuffer& rb = rec.buffers.at(serial);
    const trace::BufferId b = id_of.at(serial);
    trace::BufferKind kind = trace::BufferKind::kOther;
    if (rb.workspace) {
      kind = trace::BufferKind::kWorkspace;
    } else if (rb.allocated_inside && rb.freed_inside) {
      const bool short_lived = first_use[b] == trace::kNone || last_use[b] - first_use[b] <= 1;
      kind = short_lived ? trace::BufferKind::kTemp : trace::BufferKind::kActivation;
    }
    it.buffers[b].kind = kind;
  }

  if (rec.by_marker) it.events.push_back(trace::Event{trace::EventKind::kIterationMarker, 0, trace::kNone, 0});
  for (const RecordedEvent& e : rec.events) {
    trace::Event ev;
    ev.kind = e.kind;
    ev.before_op = new_index[std::min<size_t>(e.before_op, rec.ops.size())];
    ev.time_ns = e.time_ns;
    ev.buffer = e.serial == 0 ? trace::kNone : id_of.at(e.serial);
    it.events.push_back(ev);
  }
  trace::InferPhases(it);
  trace::InferKinds(it);
  KARMA_RETURN_IF_ERROR(trace::Validate(it));
  return out;
}

}  // namespace karma::rt
