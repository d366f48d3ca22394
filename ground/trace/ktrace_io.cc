// Encoder and defensive decoder of .ktrace files: every length is bounded, every record CRC-checked.
#include "ground/trace/ktrace_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/crc.hpp>
#include <cerrno>
#include <cstring>
#include <string>

#include "ground/trace/ktrace_format.h"

namespace karma::trace {
namespace {

using ktrace::RecordKind;

uint32_t Crc32(std::string_view data) {
  boost::crc_32_type crc;
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

class ByteWriter {
 public:
  template <typename T>
  void Pod(const T& v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void Str(std::string_view s) {
    Pod(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void Ids(const std::vector<BufferId>& ids) {
    if (ids.empty()) return;
    out_.append(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(BufferId));
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view data) : data_(data) {}

  template <typename T>
  bool Pod(T* v) {
    if (data_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool Str(std::string* s) {
    uint32_t len = 0;
    if (!Pod(&len) || len > ktrace::kMaxStringBytes || data_.size() - pos_ < len) return false;
    s->assign(data_.data() + pos_, len);
    pos_ += len;
    return true;
  }
  bool Ids(uint32_t n, std::vector<BufferId>* ids) {
    if ((data_.size() - pos_) / sizeof(BufferId) < n) return false;
    ids->resize(n);
    if (n == 0) return true;
    std::memcpy(ids->data(), data_.data() + pos_, size_t{n} * sizeof(BufferId));
    pos_ += size_t{n} * sizeof(BufferId);
    return true;
  }
  bool AtEnd() const { return pos_ == data_.size(); }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

void AppendRecord(std::string* file, RecordKind kind, const std::string& payload) {
  ktrace::RecordHeader h{};
  h.kind = static_cast<uint16_t>(kind);
  h.payload_bytes = static_cast<uint32_t>(payload.size());
  h.crc32 = Crc32(payload);
  file->append(reinterpret_cast<const char*>(&h), sizeof h);
  file->append(payload);
}

Status Bad(size_t offset, const std::string& what) {
  return Corrupt("corrupt .ktrace at byte " + std::to_string(offset) + ": " + what);
}

}  // namespace

std::string EncodeKtrace(const Iteration& it) {
  std::string file;
  ktrace::FileHeader fh{};
  std::memcpy(fh.magic, ktrace::kMagic, sizeof fh.magic);
  fh.version = ktrace::kFormatVersion;
  fh.header_bytes = sizeof fh;
  file.append(reinterpret_cast<const char*>(&fh), sizeof fh);

  {
    ByteWriter w;
    w.Pod(ktrace::MetaFixed{it.batch, 0});
    w.Str(it.model);
    w.Str(it.source);
    AppendRecord(&file, RecordKind::kMeta, w.bytes());
  }
  for (const Buffer& b : it.buffers) {
    ByteWriter w;
    ktrace::BufferFixed f{};
    f.id = b.id;
    f.kind = static_cast<uint8_t>(b.kind);
    f.bytes = b.bytes;
    f.address = b.address;
    w.Pod(f);
    w.Str(b.dtype);
    w.Str(b.site);
    AppendRecord(&file, RecordKind::kBuffer, w.bytes());
  }
  for (const Op& op : it.ops) {
    ByteWriter w;
    ktrace::OpFixed f{};
    f.id = op.id;
    f.kind = static_cast<uint8_t>(op.kind);
    f.phase = static_cast<uint8_t>(op.phase);
    f.stream = op.stream;
    f.n_reads = static_cast<uint32_t>(op.reads.size());
    f.n_writes = static_cast<uint32_t>(op.writes.size());
    f.n_touches = static_cast<uint32_t>(op.touches.size());
    f.flops = op.flops;
    f.bytes = op.bytes;
    f.duration_ns = op.duration_ns;
    w.Pod(f);
    w.Str(op.name);
    w.Ids(op.reads);
    w.Ids(op.writes);
    w.Ids(op.touches);
    AppendRecord(&file, RecordKind::kOp, w.bytes());
  }
  for (const Event& e : it.events) {
    ByteWriter w;
    ktrace::EventFixed f{};
    f.kind = static_cast<uint8_t>(e.kind);
    f.before_op = e.before_op;
    f.buffer = e.buffer;
    f.time_ns = e.time_ns;
    w.Pod(f);
    AppendRecord(&file, RecordKind::kEvent, w.bytes());
  }
  {
    ByteWriter w;
    w.Pod(ktrace::EndFixed{static_cast<uint32_t>(it.buffers.size()), static_cast<uint32_t>(it.ops.size()),
                           static_cast<uint32_t>(it.events.size()), 0});
    AppendRecord(&file, RecordKind::kEnd, w.bytes());
  }
  return file;
}

Result<Iteration> DecodeKtrace(std::string_view bytes) {
  ktrace::FileHeader fh{};
  if (bytes.size() < sizeof fh) {
    if (bytes.size() >= sizeof fh.magic && std::memcmp(bytes.data(), ktrace::kMagic, sizeof fh.magic) != 0) {
      return Corrupt("not a .ktrace file (bad magic)");
    }
    return Corrupt("truncated .ktrace: " + std::to_string(bytes.size()) + " bytes, shorter than the file header");
  }
  std::memcpy(&fh, bytes.data(), sizeof fh);
  if (std::memcmp(fh.magic, ktrace::kMagic, sizeof fh.magic) != 0) return Corrupt("not a .ktrace file (bad magic)");
  if (fh.version > ktrace::kFormatVersion) {
    return Unsupported(".ktrace format version " + std::to_string(fh.version) +
                       " is newer than this build supports (version " + std::to_string(ktrace::kFormatVersion) +
                       "); use a newer karma-trace");
  }
  if (fh.version == 0) return Corrupt("corrupt .ktrace: format version 0");
  if (fh.header_bytes != sizeof fh) return Bad(8, "file header size " + std::to_string(fh.header_bytes));

  Iteration it;
  bool have_meta = false;
  bool have_end = false;
  size_t pos = sizeof fh;
  while (pos < bytes.size()) {
    if (have_end) return Bad(pos, "data after the end record");
    ktrace::RecordHeader rh{};
    if (bytes.size() - pos < sizeof rh) return Corrupt("truncated .ktrace: cut inside a record header");
    std::memcpy(&rh, bytes.data() + pos, sizeof rh);
    const size_t record_at = pos;
    pos += sizeof rh;
    if (rh.payload_bytes > ktrace::kMaxRecordBytes) {
      return Bad(record_at, "record length " + std::to_string(rh.payload_bytes) + " exceeds the limit");
    }
    if (bytes.size() - pos < rh.payload_bytes) return Corrupt("truncated .ktrace: cut inside a record");
    const std::string_view payload = bytes.substr(pos, rh.payload_bytes);
    pos += rh.payload_bytes;
    if (Crc32(payload) != rh.crc32) return Bad(record_at, "record checksum mismatch");
    if (rh.flags != 0) return Bad(record_at, "unknown record flags");

    ByteReader r(payload);
    const auto kind = static_cast<RecordKind>(rh.kind);
    if (!have_meta && kind != RecordKind::kMeta) return Bad(record_at, "the first record is not the meta record");
    switch (kind) {
      case RecordKind::kMeta: {
        if (have_meta) return Bad(record_at, "a second meta record");
        ktrace::MetaFixed f{};
        if (!r.Pod(&f) || !r.Str(&it.model) || !r.Str(&it.source)) return Bad(record_at, "short meta record");
        it.batch = f.batch;
        have_meta = true;
        break;
      }
      case RecordKind::kBuffer: {
        ktrace::BufferFixed f{};
        Buffer b;
        if (!r.Pod(&f) || !r.Str(&b.dtype) || !r.Str(&b.site)) return Bad(record_at, "short buffer record");
        b.id = f.id;
        b.kind = static_cast<BufferKind>(f.kind);
        b.bytes = f.bytes;
        b.address = f.address;
        it.buffers.push_back(std::move(b));
        break;
      }
      case RecordKind::kOp: {
        ktrace::OpFixed f{};
        Op op;
        if (!r.Pod(&f) || !r.Str(&op.name) || !r.Ids(f.n_reads, &op.reads) || !r.Ids(f.n_writes, &op.writes) ||
            !r.Ids(f.n_touches, &op.touches)) {
          return Bad(record_at, "short op record");
        }
        op.id = f.id;
        op.kind = static_cast<OpKind>(f.kind);
        op.phase = static_cast<Phase>(f.phase);
        op.stream = f.stream;
        op.flops = f.flops;
        op.bytes = f.bytes;
        op.duration_ns = f.duration_ns;
        it.ops.push_back(std::move(op));
        break;
      }
      case RecordKind::kEvent: {
        ktrace::EventFixed f{};
        if (!r.Pod(&f)) return Bad(record_at, "short event record");
        it.events.push_back(Event{static_cast<EventKind>(f.kind), f.before_op, f.buffer, f.time_ns});
        break;
      }
      case RecordKind::kEnd: {
        ktrace::EndFixed f{};
        if (!r.Pod(&f)) return Bad(record_at, "short end record");
        if (f.buffer_count != it.buffers.size() || f.op_count != it.ops.size() ||
            f.event_count != it.events.size()) {
          return Bad(record_at, "end record counts do not match the records");
        }
        have_end = true;
        break;
      }
      default:
        return Bad(record_at, "unknown record kind " + std::to_string(rh.kind));
    }
    if (!r.AtEnd()) return Bad(record_at, "record has trailing bytes");
  }
  if (!have_meta) return Corrupt("truncated .ktrace: no records");
  if (!have_end) return Corrupt("truncated .ktrace: the end record is missing");
  KARMA_RETURN_IF_ERROR(Validate(it));
  return it;
}

Result<std::string> ReadWholeFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return IoError(path + " is not a regular file");
  }
  std::string data;
  data.resize(static_cast<size_t>(st.st_size));
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::read(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  data.resize(off);
  return data;
}

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("cannot create " + tmp + ": " + std::strerror(errno));
  size_t off = 0;
  while (off < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + off, contents.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return IoError("cannot write " + tmp + ": " + err);
    }
    off += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return IoError("cannot write " + path + ": " + err);
  }
  return Status::Ok();
}

Status WriteKtraceFile(const Iteration& it, const std::string& path) {
  return WriteFileAtomically(path, EncodeKtrace(it));
}

Result<Iteration> ReadKtraceFile(const std::string& path) {
  KARMA_ASSIGN_OR_RETURN(std::string data, ReadWholeFile(path));
  auto it = DecodeKtrace(data);
  if (!it.ok()) return it.status().WithContext(path);
  return it;
}

}  // namespace karma::trace
