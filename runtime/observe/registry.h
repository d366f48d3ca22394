// The allocation registry: which live buffer, if any, contains a device address.
#pragma once

#include <cstdint>
#include <map>
#include <shared_mutex>
#include <vector>

namespace karma::rt {

// Where a buffer's memory came from.
enum class Origin : uint8_t {
  kArena = 0,        // a device allocation KARMA serves from its managed arena
  kDevice = 1,       // device memory passed through (memory pools, or the arena was unavailable)
  kAppManaged = 2,   // the application's own cudaMallocManaged
  kHostPinned = 3,   // cudaMallocHost / cudaHostAlloc: known so that it is never mistaken for device memory
};
const char* OriginName(Origin o);
// Managed memory, which KARMA may prefetch, evict and discard: the arena's and the application's own.
inline bool Movable(Origin o) { return o == Origin::kArena || o == Origin::kAppManaged; }

struct BufferEntry {
  uint64_t start = 0;
  uint64_t size = 0;
  uint64_t serial = 0;   // unique for the life of the process: the buffer's identity in recordings
  Origin origin = Origin::kArena;
  uint32_t site = 0;     // allocation site id (0: not captured)
  // Where in the op sequence it was allocated (see `Births` in observer.h): the same for the same allocation
  // of every iteration wherever the allocator places it. 0 when not observing.
  uint64_t birth = 0;
  uint64_t birth_group = 0;  // the birth before telling apart buffers of that group alive at the same time
};

// Address intervals -> buffers. An ordered map keyed by start answers "which interval contains p" with one
// predecessor lookup: allocations never overlap, so nothing of an interval map's splitting and merging of
// overlapping intervals (Boost.ICL) is needed, and the map stays a plain node container that is cheap to update
// on every allocation. A shared mutex lets launches on many threads look up at once.
class Registry {
 public:
  // Registers [start, start + size); returns the new entry's serial. A stale entry at the same start (memory
  // freed behind our back) is replaced.
  uint64_t Insert(uint64_t start, uint64_t size, Origin origin, uint32_t site, uint64_t birth = 0,
                  uint64_t birth_group = 0);
  // Removes the entry starting exactly at start; false when there is none.
  bool Erase(uint64_t start, BufferEntry* removed = nullptr);
  // The entry containing p, if any.
  bool Find(uint64_t p, BufferEntry* out) const;
  size_t size() const;
  uint64_t bytes(Origin origin) const;
  // Every live entry, in address order.
  std::vector<BufferEntry> Entries() const;

  // Many lookups under one lock: for scanning a launch's parameters.
  class Reader {
   public:
    explicit Reader(const Registry& r) : r_(r), lock_(r.mu_) {}
    // nullptr when p is in no buffer; quick rejection of values outside every buffer.
    const BufferEntry* Find(uint64_t p) const;

   private:
    const Registry& r_;
    std::shared_lock<std::shared_mutex> lock_;
  };

 private:
  const BufferEntry* FindLocked(uint64_t p) const;
  mutable std::shared_mutex mu_;
  std::map<uint64_t, BufferEntry> by_start_;
  uint64_t lo_ = UINT64_MAX;  // bounds of everything ever inserted (a cheap filter for non-pointer words)
  uint64_t hi_ = 0;
  uint64_t next_serial_ = 1;
  uint64_t bytes_[4] = {};
};

}  // namespace karma::rt
