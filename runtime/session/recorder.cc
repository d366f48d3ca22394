// Turning a recorded iteration into the trace model.
#include "runtime/session/recorder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <thread>

#include "runtime/session/arena.h"
#include "runtime/trace/inference.h"

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

RecordedOp::ProbeCost& RecordedOp::ProbeCost::operator+=(const ProbeCost& o) {
  probe_bytes += o.probe_bytes;
  probe_ns += o.probe_ns;
  reruns += o.reruns;
  rerun_bytes += o.rerun_bytes;
  rerun_ns += o.rerun_ns;
  return *this;
}

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

// How one registry buffer appears in the trace: whole, or as the sub-buffers (atoms) its ops' pointers show (a
// caching allocator's segment holding several tensors). Residency moves by 64 KiB page, so two atoms share at most
// a page at each end: a plan over atoms counts nearly what the device holds, and an eviction of one atom moves
// all but those end pages. (With 2 MiB pages the runtime planned such segments by page: no recompute there, and
// slower; docs/runtime-e2e.md.)
struct Split {
  std::vector<uint64_t> bounds;  // atom k is [bounds[k], bounds[k + 1]) relative to the buffer's start
  std::vector<trace::BufferId> ids;  // per atom; kNone for atoms no op touches
  bool whole = true;
};

// The atoms a use touches: with a known extent every atom inside [offset, offset + extent), else the one that
// starts at offset (a kernel argument says where a tensor starts, not where it ends).
template <typename F>
void ForAtoms(const Split& sp, const RecordedUse& u, F f) {
  auto it = std::upper_bound(sp.bounds.begin(), sp.bounds.end(), u.offset);
  size_t k = it == sp.bounds.begin() ? 0 : static_cast<size_t>(it - sp.bounds.begin()) - 1;
  if (k + 1 >= sp.bounds.size()) return;
  const uint64_t end = u.extent != 0 ? u.offset + u.extent : sp.bounds[k + 1];
  for (; k + 1 < sp.bounds.size() && sp.bounds[k] < end; ++k) f(k);
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
  std::vector<bool> done(rec.ops.size(), false);
  uint32_t kept = 0;
  for (size_t i = 0; i < rec.ops.size(); ++i) {
    new_index[i] = kept;
    done[i] = rec.ops[i].state.load(std::memory_order_acquire) == RecordedOp::kDone;
    if (done[i]) kept++;
  }
  new_index[rec.ops.size()] = kept;

  // A kernel's write the profiling iteration measured (RecordedUse::written) has a known extent.
  for (size_t i = 0; i < rec.ops.size(); ++i) {
    for (RecordedUse& u : rec.ops[i].uses) {
      if (u.written != 0) u.extent = u.written;
    }
  }

  // Where each allocation is split: at every offset a pointer showed and at the end of every known extent. An
  // allocation only ever passed by its start holds one tensor (per-tensor allocators): it stays whole even when
  // a GEMM uses only part of it, since kernels of unknown extent may use the rest.
  std::unordered_map<uint64_t, Split> splits;
  for (uint64_t serial : rec.buffer_order) {
    Split& sp = splits[serial];
    sp.bounds = {0, rec.buffers.at(serial).entry.size};
  }
  for (size_t i = 0; i < rec.ops.size(); ++i) {
    if (!done[i]) continue;
    for (const RecordedUse& u : rec.ops[i].uses) {
      Split& sp = splits.at(u.serial);
      const uint64_t size = rec.buffers.at(u.serial).entry.size;
      if (u.offset != 0 && u.offset < size) sp.bounds.push_back(u.offset);
    }
  }
  for (size_t i = 0; i < rec.ops.size(); ++i) {
    if (!done[i]) continue;
    for (const RecordedUse& u : rec.ops[i].uses) {
      Split& sp = splits.at(u.serial);
      const uint64_t size = rec.buffers.at(u.serial).entry.size;
      // (A kernel's measured write ends where it ends: the bytes after it, up to the next pointer, are not its.)
      if ((sp.bounds.size() > 2 || u.written != 0) && u.extent != 0 && u.offset + u.extent < size) {
        sp.bounds.push_back(u.offset + u.extent);
      }
    }
  }
  for (auto& [serial, sp] : splits) {
    std::sort(sp.bounds.begin(), sp.bounds.end());
    sp.bounds.erase(std::unique(sp.bounds.begin(), sp.bounds.end()), sp.bounds.end());
    if (sp.bounds.size() < 2) sp.bounds.push_back(sp.bounds.front());  // a zero-byte allocation
    sp.whole = sp.bounds.size() == 2;
    sp.ids.assign(sp.bounds.size() - 1, trace::kNone);
  }
  // Which atoms are used at all (a split allocation's untouched gaps are not buffers), and which lie inside an
  // operand whose extent the API stated (a GEMM's matrices, a copy): their bytes belong to one tensor.
  std::unordered_map<uint64_t, std::vector<bool>> used, stated, scratch, tensor;
  for (auto& [serial, sp] : splits) {
    used[serial].assign(sp.bounds.size() - 1, sp.whole);
    stated[serial].assign(sp.bounds.size() - 1, false);
    scratch[serial].assign(sp.bounds.size() - 1, false);
    tensor[serial].assign(sp.bounds.size() - 1, false);
  }
  for (size_t i = 0; i < rec.ops.size(); ++i) {
    if (!done[i]) continue;
    for (const RecordedUse& u : rec.ops[i].uses) {
      ForAtoms(splits.at(u.serial), u, [&](size_t k) {
        used.at(u.serial)[k] = true;
        if (u.extent != 0 && !u.gaps) stated.at(u.serial)[k] = true;
        (u.workspace ? scratch : tensor).at(u.serial)[k] = true;
      });
    }
  }

  // Buffer ids in order of first appearance of their allocation, atoms in address order.
  for (uint64_t serial : rec.buffer_order) {
    const RecordedBuffer& rb = rec.buffers.at(serial);
    Split& sp = splits.at(serial);
    for (size_t k = 0; k < sp.ids.size(); ++k) {
      if (!used.at(serial)[k]) continue;
      trace::Buffer b;
      b.id = static_cast<trace::BufferId>(it.buffers.size());
      b.bytes = sp.bounds[k + 1] - sp.bounds[k];
      b.address = rb.entry.start + sp.bounds[k];
      b.dtype = rb.dtype;
      if (ctx.sites != nullptr) b.site = ctx.sites->Describe(rb.entry.site);
      sp.ids[k] = b.id;
      ReplayBuffer r;
      r.address = b.address;
      r.bytes = b.bytes;
      r.alloc_start = rb.entry.start;
      r.alloc_bytes = rb.entry.size;
      r.origin = rb.entry.origin;
      r.allocated_inside = rb.allocated_inside;
      r.alloc_ordinal = rb.alloc_ordinal;
      r.shared_scratch = scratch.at(serial)[k] && tensor.at(serial)[k];
      r.exact = rb.entry.origin == Origin::kArena &&
                ((sp.whole && rb.allocated_inside && rb.freed_inside) || stated.at(serial)[k]);
      out.buffers.push_back(r);
      it.buffers.push_back(std::move(b));
    }
  }
  const size_t nbuf = it.buffers.size();

  std::vector<uint32_t> first_use(nbuf, trace::kNone), last_use(nbuf, trace::kNone);
  std::vector<bool> rop_kernel;  // per kept op
  std::vector<bool> fresh(nbuf, false);  // the first use creates the value
  for (uint64_t serial : rec.buffer_order) {
    for (trace::BufferId id : splits.at(serial).ids) {
      if (id != trace::kNone) fresh[id] = rec.buffers.at(serial).allocated_inside;
    }
  }
  for (size_t i = 0; i < rec.ops.size(); ++i) {
    RecordedOp& rop = rec.ops[i];
    if (!done[i]) {
      ReleaseEvents(api, rop);
      continue;
    }
    trace::Op op;
    op.id = static_cast<trace::OpId>(it.ops.size());
    op.name = rop.name;
    op.kind = rop.kind;
    op.stream = rop.stream;
    op.flops = rop.flops;
    op.duration_ns = DurationNs(api, rop);
    ReleaseEvents(api, rop);
    // One entry per buffer: directions of repeated operands combine. A kernel's write of unknown extent may
    // leave part of the buffer as it was: it also reads, and so does a write that skips bytes of its extent. A
    // library call writes the whole tensor it names.
    std::map<trace::BufferId, uint8_t> dirs;
    for (const RecordedUse& u : rop.uses) {
      uint8_t bits = static_cast<uint8_t>(u.access);
      if (u.access == Access::kWrite && (u.gaps || (u.extent == 0 && rop.kind != trace::OpKind::kLibrary))) {
        bits = static_cast<uint8_t>(Access::kReadWrite);
      }
      if (u.access == Access::kTouch && u.changed >= 0) {
        bits = static_cast<uint8_t>(u.changed == 1 ? Access::kReadWrite : Access::kRead);
      }
      const Split& sp = splits.at(u.serial);
      ForAtoms(sp, u, [&](size_t k) {
        const trace::BufferId id = sp.ids[k];
        dirs[id] |= bits;
        // A probed first touch that changed the bytes created the value, like a fresh allocation's first use,
        // unless the test showed an update.
        if (u.changed == 1 && !u.updates && first_use[id] == trace::kNone) fresh[id] = true;
      });
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
    rop_kernel.push_back(rop.kind == trace::OpKind::kKernel);
    it.ops.push_back(std::move(op));
    ReplayOp& rp = out.ops.emplace_back(ReplayOp{rop.shape, rop.stream, rop.stream_key, rop.relaunch, {}, {}, {}});
    for (const RecordedUse& u : rop.uses) {
      const RecordedBuffer& rb = rec.buffers.at(u.serial);
      if (u.written != 0) rp.written.push_back({rb.entry.start + u.offset, u.written});
      const Split& sp = splits.at(u.serial);
      std::vector<trace::BufferId> covered;  // the sub-buffers the operand covers
      ForAtoms(sp, u, [&](size_t k) {
        if (sp.ids[k] != trace::kNone) covered.push_back(sp.ids[k]);
      });
      if (covered.size() > 1) rp.spans.push_back(covered);
      if (u.slot == kNoSlot || sp.whole || rb.allocated_inside || !Movable(rb.entry.origin) || covered.empty()) {
        continue;
      }
      rp.anchors.push_back(Anchor{u.slot, rb.entry.start + u.offset, std::move(covered)});
    }
  }

  // A kernel's pointer arguments do not say whether it reads or writes. A buffer allocated inside the
  // iteration holds nothing before its first use, so that use writes it (and so does a probed first touch that
  // changed carried-over memory).
  for (size_t b = 0; b < nbuf; ++b) {
    if (!fresh[b] || first_use[b] == trace::kNone) continue;
    trace::Op& op = it.ops[first_use[b]];
    const auto id = static_cast<trace::BufferId>(b);
    auto t = std::find(op.touches.begin(), op.touches.end(), id);
    if (t != op.touches.end()) {
      op.touches.erase(t);
    } else if (rop_kernel[first_use[b]]) {
      auto r = std::find(op.reads.begin(), op.reads.end(), id);  // a probed read-write of fresh memory
      if (r == op.reads.end()) continue;
      op.reads.erase(r);
    } else {
      continue;
    }
    if (!std::binary_search(op.writes.begin(), op.writes.end(), id)) {
      op.writes.insert(std::upper_bound(op.writes.begin(), op.writes.end(), id), id);
    }
  }

  // Kinds from what the recording shows (the API does not say what a buffer holds).
  for (uint64_t serial : rec.buffer_order) {
    const RecordedBuffer& rb = rec.buffers.at(serial);
    for (trace::BufferId b : splits.at(serial).ids) {
      if (b == trace::kNone) continue;
      trace::BufferKind kind = trace::BufferKind::kOther;
      if (rb.workspace) {
        kind = trace::BufferKind::kWorkspace;
      } else if (rb.allocated_inside && rb.freed_inside) {
        const bool short_lived = first_use[b] == trace::kNone || last_use[b] - first_use[b] <= 1;
        kind = short_lived ? trace::BufferKind::kTemp : trace::BufferKind::kActivation;
      }
      it.buffers[b].kind = kind;
    }
  }

  // Events: an allocation split into atoms is allocated and freed as a whole, so each atom gets the event.
  if (rec.by_marker) it.events.push_back(trace::Event{trace::EventKind::kIterationMarker, 0, trace::kNone, 0});
  for (const RecordedEvent& e : rec.events) {
    trace::Event ev;
    ev.kind = e.kind;
    ev.before_op = new_index[std::min<size_t>(e.before_op, rec.ops.size())];
    ev.time_ns = e.time_ns;
    if (e.serial == 0) {
      ev.buffer = trace::kNone;
      it.events.push_back(ev);
      continue;
    }
    for (trace::BufferId b : splits.at(e.serial).ids) {
      if (b == trace::kNone) continue;
      ev.buffer = b;
      it.events.push_back(ev);
    }
  }
  trace::InferPhases(it);
  trace::InferKinds(it);
  KARMA_RETURN_IF_ERROR(trace::Validate(it));
  return out;
}

}  // namespace karma::rt
