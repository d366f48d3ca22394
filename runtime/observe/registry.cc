// The allocation registry: an ordered map of non-overlapping intervals under a shared mutex.
#include "runtime/observe/registry.h"

#include <algorithm>
#include <mutex>

namespace karma::rt {

const char* OriginName(Origin o) {
  switch (o) {
    case Origin::kArena: return "arena";
    case Origin::kDevice: return "device";
    case Origin::kAppManaged: return "managed";
    case Origin::kHostPinned: return "host-pinned";
  }
  return "?";
}

uint64_t Registry::Insert(uint64_t start, uint64_t size, Origin origin, uint32_t site, uint64_t birth,
                          uint64_t birth_group) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto old = by_start_.find(start);
  if (old != by_start_.end()) {
    bytes_[static_cast<int>(old->second.origin)] -= old->second.size;
    by_start_.erase(old);
  }
  BufferEntry e{start, size, next_serial_++, origin, site, birth, birth_group};
  by_start_[start] = e;
  bytes_[static_cast<int>(origin)] += size;
  lo_ = std::min(lo_, start);
  hi_ = std::max(hi_, start + std::max<uint64_t>(size, 1));
  return e.serial;
}

bool Registry::Erase(uint64_t start, BufferEntry* removed) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto it = by_start_.find(start);
  if (it == by_start_.end()) return false;
  if (removed != nullptr) *removed = it->second;
  bytes_[static_cast<int>(it->second.origin)] -= it->second.size;
  by_start_.erase(it);
  return true;
}

const BufferEntry* Registry::FindLocked(uint64_t p) const {
  if (p < lo_ || p >= hi_) return nullptr;
  auto it = by_start_.upper_bound(p);
  if (it == by_start_.begin()) return nullptr;
  --it;
  const BufferEntry& e = it->second;
  // A zero-byte buffer still owns its start address.
  return p < e.start + std::max<uint64_t>(e.size, 1) ? &e : nullptr;
}

bool Registry::Find(uint64_t p, BufferEntry* out) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  const BufferEntry* e = FindLocked(p);
  if (e == nullptr) return false;
  *out = *e;
  return true;
}

size_t Registry::size() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return by_start_.size();
}

uint64_t Registry::bytes(Origin origin) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return bytes_[static_cast<int>(origin)];
}

std::vector<BufferEntry> Registry::Entries() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  std::vector<BufferEntry> out;
  out.reserve(by_start_.size());
  for (const auto& [start, e] : by_start_) out.push_back(e);
  return out;
}

const BufferEntry* Registry::Reader::Find(uint64_t p) const { return r_.FindLocked(p); }

}  // namespace karma::rt
