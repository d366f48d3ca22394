// The in-memory model of one training iteration: buffers, ordered ops and events (recorded or imported).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ground/common/status.h"

namespace karma::trace {

using BufferId = uint32_t;
using OpId = uint32_t;
inline constexpr uint32_t kNone = UINT32_MAX;

// Values are stored in .ktrace files: append, never renumber.
enum class BufferKind : uint8_t {
  kParam = 0, kInput = 1, kActivation = 2, kTemp = 3, kGrad = 4, kState = 5, kWorkspace = 6, kOther = 7,
};
inline constexpr int kBufferKindCount = 8;

enum class Phase : uint8_t { kUnknown = 0, kForward = 1, kBackward = 2, kOptimizer = 3 };
inline constexpr int kPhaseCount = 4;

enum class OpKind : uint8_t { kKernel = 0, kLibrary = 1, kCopy = 2, kMemset = 3 };
inline constexpr int kOpKindCount = 4;

enum class EventKind : uint8_t {
  kAlloc = 0, kFreeRequested = 1, kFreeCompleted = 2, kSync = 3, kIterationMarker = 4,
};
inline constexpr int kEventKindCount = 5;

const char* Name(BufferKind k);
const char* Name(Phase p);
const char* Name(OpKind k);
const char* Name(EventKind k);
bool ParseBufferKind(std::string_view s, BufferKind* out);
bool ParsePhase(std::string_view s, Phase* out);
bool ParseOpKind(std::string_view s, OpKind* out);
bool ParseEventKind(std::string_view s, EventKind* out);

struct Buffer {
  BufferId id = 0;
  uint64_t bytes = 0;
  BufferKind kind = BufferKind::kOther;
  std::string dtype;     // element type when known ("float32"), else empty
  std::string site;      // allocation site (symbolized frames, innermost first), else empty
  uint64_t address = 0;  // device address when recorded, 0 when unknown
  // What a move copies where that is less than `bytes` (a planning copy whose sizes are rounded up to whole pages:
  // the value's own bytes), else 0. Not stored in files.
  uint64_t moved_bytes = 0;

  uint64_t MovedBytes() const { return moved_bytes != 0 ? moved_bytes : bytes; }
  // Its element count by `dtype` (4-byte elements where the type is unknown).
  uint64_t Elements() const;
  bool operator==(const Buffer&) const = default;
};

struct Op {
  OpId id = 0;
  std::string name;
  OpKind kind = OpKind::kKernel;
  Phase phase = Phase::kUnknown;
  uint64_t flops = 0;
  uint64_t bytes = 0;        // bytes of all buffers it reads and writes
  uint64_t duration_ns = 0;  // measured duration; 0 = unknown (a cost model gives one)
  uint32_t stream = 0;
  std::vector<BufferId> reads;
  std::vector<BufferId> writes;   // in-place ops list a buffer in both
  std::vector<BufferId> touches;  // accessed, direction unknown (e.g. found in an opaque struct parameter)

  bool operator==(const Op&) const = default;
};

struct Event {
  EventKind kind = EventKind::kSync;
  uint32_t before_op = 0;      // the event happened before the op with this index (ops.size(): after the last)
  BufferId buffer = kNone;     // alloc/free events only
  uint64_t time_ns = 0;        // host time since the iteration began; 0 = unknown

  bool operator==(const Event&) const = default;
};

struct Iteration {
  std::string model;
  std::string source;
  uint32_t batch = 0;
  std::vector<Buffer> buffers;  // buffers[i].id == i
  std::vector<Op> ops;          // ops[i].id == i, in execution order
  std::vector<Event> events;    // ordered by before_op

  bool operator==(const Iteration&) const = default;
};

// Checks the invariants every reader relies on (ids equal indices, references in range, events ordered).
Status Validate(const Iteration& it);

}  // namespace karma::trace
