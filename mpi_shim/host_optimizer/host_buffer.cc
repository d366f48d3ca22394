// HostBuffer: mmap with 2 MiB alignment, MADV_HUGEPAGE, parallel first touch; and MemAvailable.
#include "mpi_shim/host_optimizer/host_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

namespace karma::hostopt {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// Pages are touched in chunks of this size, one chunk per work item.
constexpr size_t kTouchChunk = size_t{4} << 20;

}  // namespace

Result<HostBuffer> HostBuffer::Allocate(size_t bytes, ThreadPool* pool) {
  HostBuffer b;
  if (bytes == 0) return b;
  const size_t mapped = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // Over-map by one huge page and trim both ends so the start is 2 MiB aligned: THP can only back
  // aligned 2 MiB ranges, and a 4 KiB-page TLB covers too little for multi-GB streams.
  const size_t span = mapped + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return Status(Code::kResourceExhausted,
                  "host buffer: cannot map " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t tail = aligned + mapped;
  if (start + span > tail) munmap(reinterpret_cast<void*>(tail), start + span - tail);
  // Only advice: where THP is off the buffer still works with small pages.
  madvise(reinterpret_cast<void*>(aligned), mapped, MADV_HUGEPAGE);
  b.data_ = reinterpret_cast<void*>(aligned);
  b.size_ = bytes;
  b.mapped_ = mapped;

  // The mapping reads as zeros already; writing the zeros makes each page resident now, on the worker that
  // will later stream through it, instead of faulting during the first optimizer step.
  char* base = b.as<char>();
  auto touch = [base, mapped](size_t chunk, int) {
    const size_t off = chunk * kTouchChunk;
    std::memset(base + off, 0, std::min(kTouchChunk, mapped - off));
  };
  const size_t chunks = (mapped + kTouchChunk - 1) / kTouchChunk;
  if (pool) {
    pool->ParallelFor(chunks, touch);
  } else {
    for (size_t c = 0; c < chunks; ++c) touch(c, 0);
  }
  return b;
}

HostBuffer::~HostBuffer() {
  if (data_) munmap(data_, mapped_);
}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) munmap(data_, mapped_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

size_t AvailableMemoryBytes() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  size_t kib = 0;
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long v = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
      kib = static_cast<size_t>(v);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

}  // namespace karma::hostopt
