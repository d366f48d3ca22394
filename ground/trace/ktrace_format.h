// The .ktrace binary format, shared by writer and reader: layout, record kinds and their fixed sizes.
//
// File  := FileHeader Record* (an End record last)
// Record := RecordHeader payload[payload_bytes]; RecordHeader::crc32 is the CRC-32 of the payload.
// Payload := the record kind's fixed struct, then its variable part:
//   Meta:   MetaFixed, string model, string source
//   Buffer: BufferFixed, string dtype, string site
//   Op:     OpFixed, string name, u32 reads[n_reads], u32 writes[n_writes], u32 touches[n_touches]
//   Event:  EventFixed
//   End:    EndFixed
// string := u32 length, bytes (no terminator). All integers little-endian.
// Meta comes first; End's counts must match the records before it, so a cut file is always detected.
#pragma once

#include <bit>
#include <cstdint>

namespace karma::ktrace {

static_assert(std::endian::native == std::endian::little, ".ktrace is written in the host's byte order");

inline constexpr char kMagic[8] = {'K', 'A', 'R', 'M', 'A', 'T', 'R', 'C'};
// The one place the format version is defined. Bump it for any change a v(N) reader would misread.
inline constexpr uint32_t kFormatVersion = 1;

// Record kinds are stored in files: never renumber, only append.
enum class RecordKind : uint16_t { kMeta = 1, kBuffer = 2, kOp = 3, kEvent = 4, kEnd = 5 };

// Upper bounds that keep a corrupt length from turning into a huge allocation.
inline constexpr uint32_t kMaxRecordBytes = 64u << 20;
inline constexpr uint32_t kMaxStringBytes = 1u << 20;

#pragma pack(push, 1)
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(FileHeader) for v1; lets later versions grow the header
};
static_assert(sizeof(FileHeader) == 16);

struct RecordHeader {
  uint16_t kind;
  uint16_t flags;  // 0 in v1
  uint32_t payload_bytes;
  uint32_t crc32;
};
static_assert(sizeof(RecordHeader) == 12);

struct MetaFixed {
  uint32_t batch;
  uint32_t reserved;
};
static_assert(sizeof(MetaFixed) == 8);

struct BufferFixed {
  uint32_t id;
  uint8_t kind;  // trace::BufferKind
  uint8_t reserved[3];
  uint64_t bytes;
  uint64_t address;
};
static_assert(sizeof(BufferFixed) == 24);

struct OpFixed {
  uint32_t id;
  uint8_t kind;   // trace::OpKind
  uint8_t phase;  // trace::Phase
  uint16_t reserved;
  uint32_t stream;
  uint32_t n_reads;
  uint32_t n_writes;
  uint32_t n_touches;
  uint64_t flops;
  uint64_t bytes;
  uint64_t duration_ns;
};
static_assert(sizeof(OpFixed) == 48);

struct EventFixed {
  uint8_t kind;  // trace::EventKind
  uint8_t reserved[3];
  uint32_t before_op;
  uint32_t buffer;
  uint32_t reserved2;
  uint64_t time_ns;
};
static_assert(sizeof(EventFixed) == 24);

struct EndFixed {
  uint32_t buffer_count;
  uint32_t op_count;
  uint32_t event_count;
  uint32_t reserved;
};
static_assert(sizeof(EndFixed) == 16);
#pragma pack(pop)

}  // namespace karma::ktrace
