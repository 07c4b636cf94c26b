// GGUF v3 writer: metadata in insertion order, tensor infos, then each tensor's data
// padded to the alignment. Values are checked (element types, ranges) before writing,
// so a file it writes always parses back to the same values.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>

#include "oscar/core/error.h"
#include "oscar/formats/gguf.h"
#include "oscar/formats/gguf_emitter.h"

namespace oscar::gguf {
namespace {

using detail::Emitter;

constexpr uint64_t max_alignment = uint64_t(1) << 30;

void check_alignment(uint64_t a) {
  if (a == 0 || a > max_alignment || (a & (a - 1)) != 0)
    fail("GGUF writer: alignment {} must be a nonzero power of two up to {}", a, max_alignment);
}

Value scalar_u(ValueType t, uint64_t u) {
  Value v;
  v.type = t;
  v.u = u;
  return v;
}

}  // namespace

uint64_t detail::checked_tensor_bytes(const std::string& name, GgmlType type, const std::vector<uint64_t>& ne) {
  if (ne.empty() || ne.size() > 4) fail("GGUF writer: tensor '{}': {} dimensions (must be 1..4)", name, ne.size());
  if (!ggml_type_known(uint32_t(type))) fail("GGUF writer: tensor '{}': unknown type {}", name, uint32_t(type));
  uint64_t n = 1;
  for (uint64_t d : ne) {
    if (d == 0 || d > uint64_t(std::numeric_limits<int64_t>::max()) / n)
      fail("GGUF writer: tensor '{}': bad dimension {} in [{}]", name, d, fmt::join(ne, ", "));
    n *= d;
  }
  const uint64_t row_bytes = ggml_row_bytes(type, int64_t(ne[0])), rows = n / ne[0];
  if (row_bytes != 0 && rows > std::numeric_limits<uint64_t>::max() / row_bytes)
    fail("GGUF writer: tensor '{}': byte size overflows", name);
  return row_bytes * rows;
}

void GgufWriter::set(std::string key, Value v) {
  if (key == "general.alignment") {
    if (!v.is_integer()) fail("GGUF writer: general.alignment must be an integer");
    const int64_t a = v.as_int(key);
    check_alignment(a < 0 ? 0 : uint64_t(a));
    alignment_ = uint64_t(a);
  }
  for (auto& [k, old] : kv_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(v));
}

void GgufWriter::set_string(std::string key, std::string s) {
  Value v;
  v.type = ValueType::string;
  v.s = std::move(s);
  set(std::move(key), std::move(v));
}

void GgufWriter::set_u32(std::string key, uint32_t x) { set(std::move(key), scalar_u(ValueType::u32, x)); }

void GgufWriter::set_i32(std::string key, int32_t x) {
  Value v;
  v.type = ValueType::i32;
  v.i = x;
  set(std::move(key), std::move(v));
}

void GgufWriter::set_f32(std::string key, float x) {
  Value v;
  v.type = ValueType::f32;
  v.f = x;
  set(std::move(key), std::move(v));
}

void GgufWriter::set_bool(std::string key, bool x) { set(std::move(key), scalar_u(ValueType::boolean, x ? 1 : 0)); }

void GgufWriter::set_string_array(std::string key, const std::vector<std::string>& items) {
  Value v;
  v.type = ValueType::array;
  v.elem_type = ValueType::string;
  v.array.reserve(items.size());
  for (const std::string& s : items) {
    Value e;
    e.type = ValueType::string;
    e.s = s;
    v.array.push_back(std::move(e));
  }
  set(std::move(key), std::move(v));
}

void GgufWriter::set_alignment(uint64_t a) {
  check_alignment(a);
  if (a > std::numeric_limits<uint32_t>::max()) fail("GGUF writer: alignment {} does not fit u32", a);
  set_u32("general.alignment", uint32_t(a));
}

void GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne, std::vector<uint8_t> data) {
  const uint64_t expected = detail::checked_tensor_bytes(name, type, ne);
  for (const PendingTensor& t : tensors_)
    if (t.name == name) fail("GGUF writer: duplicate tensor '{}'", name);
  if (data.size() != expected)
    fail("GGUF writer: tensor '{}': {} bytes of data, but {} {} needs {}", name, data.size(), ggml_type_name(type),
         fmt::join(ne, "x"), expected);
  tensors_.push_back({std::move(name), type, std::move(ne), std::move(data)});
}

void GgufWriter::copy_from(const GgufFile& src) {
  for (const auto& [key, v] : src.metadata()) set(key, v);
  for (const TensorInfo& t : src.tensors())
    add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
}

namespace {

// `Tensors` is the writer's private list of pending tensors (name, type, ne, data).
template <typename Tensors>
void emit_file(Emitter& out, const std::vector<std::pair<std::string, Value>>& kv, const Tensors& tensors,
               uint64_t alignment) {
  detail::emit_header(out, kv, tensors, alignment, [](const auto& t) { return uint64_t(t.data.size()); });
  for (const auto& t : tensors) {
    out.bytes(t.data.data(), t.data.size());
    out.pad_to(alignment);
  }
}

}  // namespace

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> buf;
  Emitter out([&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf.insert(buf.end(), b, b + n);
  });
  emit_file(out, kv_, tensors_, alignment_);
  return buf;
}

void GgufWriter::write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("cannot create '{}': {}", tmp, std::strerror(errno));
  bool ok = true;
  Emitter out([&](const void* p, size_t n) { ok = ok && std::fwrite(p, 1, n, f) == n; });
  try {
    emit_file(out, kv_, tensors_, alignment_);
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  const int saved = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    fail("cannot write '{}': {}", tmp, std::strerror(saved ? saved : errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    fail("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(e));
  }
}

}  // namespace oscar::gguf
