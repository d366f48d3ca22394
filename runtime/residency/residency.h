// The residency layer: how the bytes of a range of device memory become resident on the device, leave it (kept on
// the host), are dropped (dead), or get device memory again to be rebuilt in. One narrow interface, so that the
// replay says what must happen and an implementation says how: `managed` (ManagedResidency: the paper's path, managed
// memory moved by prefetches and discards on streams of its own) and `copy` (CopyResidency: device memory KARMA owns
// through CUDA's virtual memory API, pinned host chunks, copy-engine transfers).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <span>

#include "ground/common/status.h"

namespace karma::rt {

// [addr, addr + bytes): whole granules (granularity()) of memory a Residency reserved. The value is in its first
// `data` bytes: a move copies no more (the rest of a block's last granule holds nothing).
struct ResidencyRange {
  uint64_t addr = 0, bytes = 0;
  uint64_t data = UINT64_MAX;
};

// A move in flight. Done when its bytes are where the move puts them and the range is usable there.
struct ResidencyTicket {
  uint32_t lane = 0;  // which queue it is in (moves of a lane complete in order)
  uint32_t seq = 0;   // 0: nothing to wait for
};

// Events an eviction's or a fetch's caller wants recorded (either may be null).
struct MoveEvents {
  cudaEvent_t done = nullptr;     // once every range's move is done: recorded only when the ticket returned has a seq
  cudaEvent_t started = nullptr;  // where the transfer starts, for timing it (managed; the copy path leaves it)
};

class Residency {
 public:
  virtual ~Residency() = default;
  virtual const char* name() const = 0;
  // The unit of residency: ranges are whole multiples of it (2 MiB on a GPU).
  virtual uint64_t granularity() const = 0;

  // Memory for the allocator: `bytes` (a multiple of the granularity) of addresses every stream may use, on the
  // device as far as the budget allows and on the host beyond it (correct, slow); with `on_device` false, nothing
  // behind them yet (an allocator makes device memory for what it hands out, Make; a use before that faults).
  virtual Result<uint64_t> Reserve(uint64_t bytes, bool on_device = true) = 0;
  // Gives a reservation back. No move of it may be pending.
  virtual void Release(uint64_t addr) = 0;

  // Each move starts once the events in `after` (recorded after the ranges' last use; none: now) have completed,
  // and returns at once: no call on the caller's thread waits for a transfer. A move of several ranges returns the
  // ticket of the last one posted (the moves of one kind complete in order); seq 0: nothing left to wait for.
  // The bytes leave the device and stay readable and writable on the host through the same addresses.
  virtual ResidencyTicket Evict(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                                const MoveEvents& events) = 0;
  // The bytes come back to the device.
  virtual ResidencyTicket Fetch(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                                const MoveEvents& events) = 0;
  // The values are dead: their device memory is given back without a copy (or kept, dead, until something needs
  // it). `held`: the addresses stay in use (a value discarded to be rebuilt later), and their device memory is taken
  // before that of freed addresses, which an allocator is likely to hand out again soon. `user`: the stream whose
  // later work may use the addresses again; an implementation whose moves are stream-ordered (managed) makes it
  // wait for the drop, the copy path orders a later make or fetch of the range after it by itself.
  virtual ResidencyTicket Drop(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after, bool held,
                               std::optional<cudaStream_t> user) = 0;
  // Device memory for values about to be rebuilt (a recompute's targets, a new allocation): nothing is copied.
  // `user`: the stream that writes them; the caller makes it wait for the ticket (WaitOn). Managed memory makes
  // the pages resident in `user`'s order (the ticket has no seq).
  virtual ResidencyTicket Make(std::span<const ResidencyRange> r, std::span<const cudaEvent_t> after,
                               std::optional<cudaStream_t> user) = 0;
  // One range at a time.
  ResidencyTicket Evict(ResidencyRange r, std::span<const cudaEvent_t> after) { return Evict({&r, 1}, after, {}); }
  ResidencyTicket Fetch(ResidencyRange r, std::span<const cudaEvent_t> after) { return Fetch({&r, 1}, after, {}); }
  ResidencyTicket Drop(ResidencyRange r, std::span<const cudaEvent_t> after, bool held) {
    return Drop({&r, 1}, after, held, std::nullopt);
  }
  ResidencyTicket Make(ResidencyRange r, std::span<const cudaEvent_t> after) {
    return Make({&r, 1}, after, std::nullopt);
  }
  // Before the caller's thread uses an event it gave a move (MoveEvents: waits on it, queries it): returns once the
  // move has recorded it (managed moves may be issued from threads of the residency's own).
  virtual void Recorded(cudaEvent_t /*event*/) {}

  // Work given to `stream` from now on runs after the move (the caller's thread does not wait).
  virtual Status WaitOn(ResidencyTicket t, cudaStream_t stream) = 0;
  // `event` (created by the caller) completes when the move has: for code that orders and times work with events.
  virtual Status RecordDone(ResidencyTicket t, cudaEvent_t event) = 0;
  // Whether every granule of `r` is on the device with no move of it pending (a Make would change nothing).
  virtual bool Resident(ResidencyRange r) const = 0;
  // Whether every granule of `r` has device memory with no move pending, its value alive or dropped: a Make of it
  // would need no remap (an allocator places blocks there first).
  virtual bool Backed(ResidencyRange r) const = 0;
  // Whether the move has completed (host side), and waiting for it (tests, shutdown).
  virtual bool Done(ResidencyTicket t) const = 0;
  virtual void Finish() = 0;

  // Device memory the layer holds now, and the most it has held; and the part of it that holds live values (not
  // dropped), as far as the moves posted so far go.
  virtual uint64_t device_bytes() const = 0;
  virtual uint64_t live_bytes() const = 0;
  virtual uint64_t peak_device_bytes() const = 0;
};

}  // namespace karma::rt
