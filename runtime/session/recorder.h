// Recording one iteration: ops with the buffers they touch, allocation/free/sync events, and CUDA events around
// each op whose elapsed times become the measured durations. Turned into a trace off the application's threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/common/status.h"
#include "runtime/session/cuda_api.h"
#include "runtime/session/ops.h"
#include "runtime/session/registry.h"
#include "runtime/session/sites.h"
#include "runtime/trace/model.h"

namespace karma::rt {

struct RecordedOp {
  trace::OpKind kind = trace::OpKind::kKernel;
  std::string name;
  uint32_t stream = 0;
  std::vector<std::pair<uint64_t, Access>> buffers;  // (registry serial, access)
  uint64_t flops = 0;
  uint64_t bytes = 0;
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  StreamKey stream_key = 0;
  enum : uint8_t { kPending = 0, kDone = 1, kFailed = 2 };
  std::atomic<uint8_t> state{kPending};  // set by the thread that issued the op, after the real call
};

struct RecordedBuffer {
  BufferEntry entry;
  bool allocated_inside = false;
  bool freed_inside = false;
  bool workspace = false;
  std::string dtype;
};

struct RecordedEvent {
  trace::EventKind kind = trace::EventKind::kSync;
  uint32_t before_op = 0;
  uint64_t serial = 0;  // alloc/free events
  uint64_t time_ns = 0;
};

// One iteration being recorded. Mutated under the session's recording lock, except RecordedOp::state and the
// end events, which the issuing thread sets after the real call (ops live in a deque: their addresses stay put).
struct Recording {
  uint64_t iteration = 0;
  bool by_marker = false;
  int device = 0;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  std::deque<RecordedOp> ops;
  std::unordered_map<uint64_t, RecordedBuffer> buffers;  // by serial
  std::vector<uint64_t> buffer_order;                     // serials in order of first appearance
  std::vector<RecordedEvent> events;
  std::map<StreamKey, uint32_t> streams;

  // Adds the buffer when new; returns its record.
  RecordedBuffer& Buffer(const BufferEntry& e);
  uint32_t StreamId(StreamKey key);
  uint64_t NowNs() const;
  void AddEvent(trace::EventKind kind, uint64_t serial);
};

// What the trace needs besides the recording itself.
struct TraceContext {
  std::string model;
  std::string source;
  const SiteTable* sites = nullptr;
};

// Waits (bounded) for in-flight ops, reads the durations from their events and releases them, classifies the
// buffers, and builds a validated iteration. Runs on the worker thread.
Result<trace::Iteration> FinishRecording(Recording& rec, const CudaApi& api, const TraceContext& ctx);

// The trace file for this process: DIR/PROGRAM-PID.ktrace. Creates DIR (and parents) when missing.
Result<std::string> TracePath(const std::string& dir, const std::string& program, int64_t pid);

}  // namespace karma::rt
