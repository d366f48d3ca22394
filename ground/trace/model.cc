// Names of the trace model's enumerations and the invariant check shared by every reader.
#include "ground/trace/model.h"

#include <string>

namespace karma::trace {
namespace {

constexpr const char* kBufferKindNames[] = {"param", "input", "activation", "temp",
                                            "grad",  "state", "workspace",  "other"};
constexpr const char* kPhaseNames[] = {"unknown", "forward", "backward", "optimizer"};
constexpr const char* kOpKindNames[] = {"kernel", "library", "copy", "memset"};
constexpr const char* kEventKindNames[] = {"alloc", "free_requested", "free_completed", "sync",
                                           "iteration_marker"};
static_assert(std::size(kBufferKindNames) == kBufferKindCount);
static_assert(std::size(kPhaseNames) == kPhaseCount);
static_assert(std::size(kOpKindNames) == kOpKindCount);
static_assert(std::size(kEventKindNames) == kEventKindCount);

template <typename E, size_t N>
bool ParseName(const char* const (&names)[N], std::string_view s, E* out) {
  for (size_t i = 0; i < N; ++i) {
    if (s == names[i]) {
      *out = static_cast<E>(i);
      return true;
    }
  }
  return false;
}

template <size_t N>
const char* NameAt(const char* const (&names)[N], size_t i) {
  return i < N ? names[i] : "invalid";
}

Status CheckRefs(const std::vector<BufferId>& ids, size_t nbuf, const Op& op, const char* what) {
  for (BufferId b : ids) {
    if (b >= nbuf) {
      return Corrupt("op " + std::to_string(op.id) + " (" + op.name + ") " + what + " buffer " + std::to_string(b) +
                     ", but there are only " + std::to_string(nbuf) + " buffers");
    }
  }
  return Status::Ok();
}

}  // namespace

const char* Name(BufferKind k) { return NameAt(kBufferKindNames, static_cast<size_t>(k)); }
const char* Name(Phase p) { return NameAt(kPhaseNames, static_cast<size_t>(p)); }

uint64_t Buffer::Elements() const {
  uint64_t size = 4;
  if (dtype == "float64" || dtype == "int64" || dtype == "complex64") size = 8;
  else if (dtype == "float16" || dtype == "bfloat16" || dtype == "int16") size = 2;
  else if (dtype == "int8" || dtype == "uint8" || dtype == "bool") size = 1;
  return bytes / size;
}
const char* Name(OpKind k) { return NameAt(kOpKindNames, static_cast<size_t>(k)); }
const char* Name(EventKind k) { return NameAt(kEventKindNames, static_cast<size_t>(k)); }
bool ParseBufferKind(std::string_view s, BufferKind* out) { return ParseName(kBufferKindNames, s, out); }
bool ParsePhase(std::string_view s, Phase* out) { return ParseName(kPhaseNames, s, out); }
bool ParseOpKind(std::string_view s, OpKind* out) { return ParseName(kOpKindNames, s, out); }
bool ParseEventKind(std::string_view s, EventKind* out) { return ParseName(kEventKindNames, s, out); }

Status Validate(const Iteration& it) {
  const size_t nbuf = it.buffers.size();
  for (size_t i = 0; i < nbuf; ++i) {
    const Buffer& b = it.buffers[i];
    if (b.id != i) return Corrupt("buffer at index " + std::to_string(i) + " has id " + std::to_string(b.id));
    if (static_cast<int>(b.kind) >= kBufferKindCount) {
      return Corrupt("buffer " + std::to_string(i) + " has an unknown kind " + std::to_string(int(b.kind)));
    }
  }
  for (size_t i = 0; i < it.ops.size(); ++i) {
    const Op& op = it.ops[i];
    if (op.id != i) return Corrupt("op at index " + std::to_string(i) + " has id " + std::to_string(op.id));
    if (static_cast<int>(op.kind) >= kOpKindCount) {
      return Corrupt("op " + std::to_string(i) + " has an unknown kind " + std::to_string(int(op.kind)));
    }
    if (static_cast<int>(op.phase) >= kPhaseCount) {
      return Corrupt("op " + std::to_string(i) + " has an unknown phase " + std::to_string(int(op.phase)));
    }
    KARMA_RETURN_IF_ERROR(CheckRefs(op.reads, nbuf, op, "reads"));
    KARMA_RETURN_IF_ERROR(CheckRefs(op.writes, nbuf, op, "writes"));
    KARMA_RETURN_IF_ERROR(CheckRefs(op.touches, nbuf, op, "touches"));
  }
  uint32_t prev = 0;
  for (size_t i = 0; i < it.events.size(); ++i) {
    const Event& e = it.events[i];
    const std::string where = "event " + std::to_string(i) + " (" + Name(e.kind) + ")";
    if (static_cast<int>(e.kind) >= kEventKindCount) return Corrupt(where + " has an unknown kind");
    if (e.before_op > it.ops.size()) return Corrupt(where + " refers to op " + std::to_string(e.before_op));
    if (e.before_op < prev) return Corrupt(where + " is out of order");
    prev = e.before_op;
    const bool needs_buffer = e.kind == EventKind::kAlloc || e.kind == EventKind::kFreeRequested ||
                              e.kind == EventKind::kFreeCompleted;
    if (needs_buffer && e.buffer >= nbuf) return Corrupt(where + " refers to buffer " + std::to_string(e.buffer));
    if (!needs_buffer && e.buffer != kNone) return Corrupt(where + " must not name a buffer");
  }
  return Status::Ok();
}

}  // namespace karma::trace
