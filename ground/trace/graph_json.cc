// karma-graph JSON reader (every field type- and range-checked, errors name the JSON path) and writer.
#include "ground/trace/graph_json.h"

#include <nlohmann/json.hpp>

#include <string>

namespace karma::trace {
namespace {

using nlohmann::json;

Status TypeError(const std::string& path, const char* expected, const json& got) {
  std::string shown = got.dump();
  if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
  return InvalidArgument(path + ": expected " + expected + ", got " + shown);
}

// A required or optional unsigned integer field.
Status GetUint(const json& obj, const char* key, const std::string& path, bool required, uint64_t* out) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return required ? InvalidArgument(path + "." + key + ": missing") : Status::Ok();
  }
  if (it->is_number_unsigned()) {
    *out = it->get<uint64_t>();
    return Status::Ok();
  }
  if (it->is_number_integer()) {
    return InvalidArgument(path + "." + key + ": must not be negative, got " + it->dump());
  }
  return TypeError(path + "." + key, "a non-negative integer", *it);
}

Status GetString(const json& obj, const char* key, const std::string& path, bool required, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return required ? InvalidArgument(path + "." + key + ": missing") : Status::Ok();
  if (!it->is_string()) return TypeError(path + "." + key, "a string", *it);
  *out = it->get<std::string>();
  return Status::Ok();
}

Status GetIdList(const json& obj, const char* key, const std::string& path, bool required, size_t limit,
                 const char* limit_what, std::vector<uint32_t>* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return required ? InvalidArgument(path + "." + key + ": missing") : Status::Ok();
  if (!it->is_array()) return TypeError(path + "." + key, "an array of ids", *it);
  out->reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    const std::string at = path + "." + key + "[" + std::to_string(i) + "]";
    if (!v.is_number_integer()) return TypeError(at, "an integer id", v);
    if (!v.is_number_unsigned() || v.get<uint64_t>() >= limit) {
      return InvalidArgument(at + ": " + v.dump() + " does not name one of the " + std::to_string(limit) + " " +
                             limit_what);
    }
    out->push_back(static_cast<uint32_t>(v.get<uint64_t>()));
  }
  return Status::Ok();
}

Status ParseTensors(const json& arr, Iteration* it) {
  if (!arr.is_array()) return TypeError("tensors", "an array", arr);
  it->buffers.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& t = arr[i];
    const std::string path = "tensors[" + std::to_string(i) + "]";
    if (!t.is_object()) return TypeError(path, "an object", t);
    Buffer b;
    uint64_t id = 0;
    KARMA_RETURN_IF_ERROR(GetUint(t, "id", path, true, &id));
    if (id != i) return InvalidArgument(path + ".id: " + std::to_string(id) + " must equal its index " + std::to_string(i));
    b.id = static_cast<BufferId>(i);
    KARMA_RETURN_IF_ERROR(GetUint(t, "bytes", path, true, &b.bytes));
    std::string kind;
    KARMA_RETURN_IF_ERROR(GetString(t, "kind", path, true, &kind));
    if (!ParseBufferKind(kind, &b.kind)) {
      return InvalidArgument(path + ".kind: unknown kind '" + kind +
                             "' (expected param, input, activation, temp, grad, state, workspace or other)");
    }
    KARMA_RETURN_IF_ERROR(GetString(t, "dtype", path, false, &b.dtype));
    KARMA_RETURN_IF_ERROR(GetString(t, "site", path, false, &b.site));
    KARMA_RETURN_IF_ERROR(GetUint(t, "address", path, false, &b.address));
    it->buffers.push_back(std::move(b));
  }
  return Status::Ok();
}

Status ParseOps(const json& arr, Iteration* it) {
  if (!arr.is_array()) return TypeError("ops", "an array", arr);
  const size_t nbuf = it->buffers.size();
  it->ops.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& o = arr[i];
    const std::string path = "ops[" + std::to_string(i) + "]";
    if (!o.is_object()) return TypeError(path, "an object", o);
    Op op;
    uint64_t id = 0;
    KARMA_RETURN_IF_ERROR(GetUint(o, "id", path, true, &id));
    if (id != i) return InvalidArgument(path + ".id: " + std::to_string(id) + " must equal its index " + std::to_string(i));
    op.id = static_cast<OpId>(i);
    KARMA_RETURN_IF_ERROR(GetString(o, "name", path, true, &op.name));
    std::string phase;
    KARMA_RETURN_IF_ERROR(GetString(o, "phase", path, true, &phase));
    if (!ParsePhase(phase, &op.phase)) {
      return InvalidArgument(path + ".phase: unknown phase '" + phase + "' (expected forward, backward or optimizer)");
    }
    KARMA_RETURN_IF_ERROR(GetUint(o, "flops", path, true, &op.flops));
    KARMA_RETURN_IF_ERROR(GetUint(o, "bytes", path, true, &op.bytes));
    KARMA_RETURN_IF_ERROR(GetIdList(o, "reads", path, true, nbuf, "tensors", &op.reads));
    KARMA_RETURN_IF_ERROR(GetIdList(o, "writes", path, true, nbuf, "tensors", &op.writes));
    KARMA_RETURN_IF_ERROR(GetIdList(o, "touches", path, false, nbuf, "tensors", &op.touches));
    std::string kind = "kernel";
    KARMA_RETURN_IF_ERROR(GetString(o, "kind", path, false, &kind));
    if (!ParseOpKind(kind, &op.kind)) {
      return InvalidArgument(path + ".kind: unknown op kind '" + kind + "' (expected kernel, library, copy or memset)");
    }
    uint64_t stream = 0;
    KARMA_RETURN_IF_ERROR(GetUint(o, "stream", path, false, &stream));
    if (stream > UINT32_MAX) return InvalidArgument(path + ".stream: out of range");
    op.stream = static_cast<uint32_t>(stream);
    KARMA_RETURN_IF_ERROR(GetUint(o, "duration_ns", path, false, &op.duration_ns));
    it->ops.push_back(std::move(op));
  }
  return Status::Ok();
}

Status ParseEvents(const json& arr, Iteration* it) {
  if (!arr.is_array()) return TypeError("events", "an array", arr);
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& e = arr[i];
    const std::string path = "events[" + std::to_string(i) + "]";
    if (!e.is_object()) return TypeError(path, "an object", e);
    Event ev;
    std::string kind;
    KARMA_RETURN_IF_ERROR(GetString(e, "kind", path, true, &kind));
    if (!ParseEventKind(kind, &ev.kind)) return InvalidArgument(path + ".kind: unknown event kind '" + kind + "'");
    uint64_t before = 0, buffer = kNone;
    KARMA_RETURN_IF_ERROR(GetUint(e, "before_op", path, true, &before));
    KARMA_RETURN_IF_ERROR(GetUint(e, "buffer", path, false, &buffer));
    KARMA_RETURN_IF_ERROR(GetUint(e, "time_ns", path, false, &ev.time_ns));
    if (before > it->ops.size()) return InvalidArgument(path + ".before_op: " + std::to_string(before) + " is past the last op");
    if (buffer != kNone && buffer >= it->buffers.size()) {
      return InvalidArgument(path + ".buffer: " + std::to_string(buffer) + " does not name a tensor");
    }
    ev.before_op = static_cast<uint32_t>(before);
    ev.buffer = static_cast<BufferId>(buffer);
    it->events.push_back(ev);
  }
  return Status::Ok();
}

Status ParseDocument(const json& doc, Iteration* it) {
  if (!doc.is_object()) return TypeError("the document", "a JSON object", doc);
  std::string format;
  KARMA_RETURN_IF_ERROR(GetString(doc, "format", "", true, &format));
  if (format != "karma-graph") return InvalidArgument("format: expected \"karma-graph\", got \"" + format + "\"");
  uint64_t version = 0;
  KARMA_RETURN_IF_ERROR(GetUint(doc, "version", "", true, &version));
  if (version > static_cast<uint64_t>(kGraphFormatVersion)) {
    return Unsupported("karma-graph version " + std::to_string(version) + " is newer than this build supports (version " +
                       std::to_string(kGraphFormatVersion) + ")");
  }
  if (version == 0) return InvalidArgument("version: 0 is not a karma-graph version");
  KARMA_RETURN_IF_ERROR(GetString(doc, "model", "", false, &it->model));
  KARMA_RETURN_IF_ERROR(GetString(doc, "source", "", false, &it->source));
  uint64_t batch = 0;
  KARMA_RETURN_IF_ERROR(GetUint(doc, "batch", "", false, &batch));
  if (batch > UINT32_MAX) return InvalidArgument("batch: out of range");
  it->batch = static_cast<uint32_t>(batch);
  auto tensors = doc.find("tensors");
  auto ops = doc.find("ops");
  if (tensors == doc.end()) return InvalidArgument("tensors: missing");
  if (ops == doc.end()) return InvalidArgument("ops: missing");
  KARMA_RETURN_IF_ERROR(ParseTensors(*tensors, it));
  KARMA_RETURN_IF_ERROR(ParseOps(*ops, it));
  if (auto events = doc.find("events"); events != doc.end()) KARMA_RETURN_IF_ERROR(ParseEvents(*events, it));
  return Validate(*it);
}

// The format nests four levels deep; a hostile file nesting thousands deep would exhaust the parser's stack.
constexpr int kMaxDepth = 64;

Status CheckNesting(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) {
        return InvalidArgument("malformed JSON at byte " + std::to_string(i) + ": nested deeper than " +
                               std::to_string(kMaxDepth) + " levels");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Iteration> ParseGraphJson(std::string_view text) {
  KARMA_RETURN_IF_ERROR(CheckNesting(text).WithContext("karma-graph"));
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    return InvalidArgument(std::string("karma-graph: malformed JSON at byte ") + std::to_string(e.byte) + ": " +
                           e.what());
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("karma-graph: malformed JSON: ") + e.what());
  }
  Iteration it;
  Status st = ParseDocument(doc, &it);
  // Leading keys of the message are JSON paths; strip the empty path's leading dot.
  if (!st.ok()) {
    std::string m = st.message();
    if (!m.empty() && m[0] == '.') m.erase(0, 1);
    return Status(st.code(), "karma-graph: " + m);
  }
  return it;
}

std::string ToGraphJson(const Iteration& it) {
  json doc = json::object();
  doc["format"] = "karma-graph";
  doc["version"] = kGraphFormatVersion;
  doc["model"] = it.model;
  doc["batch"] = it.batch;
  doc["source"] = it.source;
  json tensors = json::array();
  for (const Buffer& b : it.buffers) {
    json t = {{"id", b.id}, {"bytes", b.bytes}, {"kind", Name(b.kind)}, {"dtype", b.dtype}};
    if (!b.site.empty()) t["site"] = b.site;
    if (b.address != 0) t["address"] = b.address;
    tensors.push_back(std::move(t));
  }
  doc["tensors"] = std::move(tensors);
  json ops = json::array();
  for (const Op& op : it.ops) {
    json o = {{"id", op.id},       {"name", op.name},     {"phase", Name(op.phase)}, {"flops", op.flops},
              {"bytes", op.bytes}, {"reads", op.reads},   {"writes", op.writes}};
    if (!op.touches.empty()) o["touches"] = op.touches;
    if (op.kind != OpKind::kKernel) o["kind"] = Name(op.kind);
    if (op.stream != 0) o["stream"] = op.stream;
    if (op.duration_ns != 0) o["duration_ns"] = op.duration_ns;
    ops.push_back(std::move(o));
  }
  doc["ops"] = std::move(ops);
  if (!it.events.empty()) {
    json events = json::array();
    for (const Event& e : it.events) {
      json j = {{"kind", Name(e.kind)}, {"before_op", e.before_op}};
      if (e.buffer != kNone) j["buffer"] = e.buffer;
      if (e.time_ns != 0) j["time_ns"] = e.time_ns;
      events.push_back(std::move(j));
    }
    doc["events"] = std::move(events);
  }
  return doc.dump() + "\n";
}

}  // namespace karma::trace
