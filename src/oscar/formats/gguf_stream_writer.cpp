// The layout is GgufWriter's (gguf_writer.cpp): magic, version 3, counts, metadata,
// tensor infos with offsets relative to the data section, padding, then each tensor's
// data padded to the alignment. Offsets are known up front because every tensor's size
// is declared before begin(), which is what lets the data follow as a stream.
#include "oscar/formats/gguf_stream_writer.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "oscar/core/error.h"

namespace oscar::gguf {
namespace {

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

template <typename T>
T narrow_u(uint64_t x, const std::string& key) {
  if (x > std::numeric_limits<T>::max()) fail("GGUF writer: metadata key '{}': {} does not fit", key, x);
  return T(x);
}

template <typename T>
T narrow_i(int64_t x, const std::string& key) {
  if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
    fail("GGUF writer: metadata key '{}': {} does not fit", key, x);
  return T(x);
}

Value string_value(std::string s) {
  Value v;
  v.type = ValueType::string;
  v.s = std::move(s);
  return v;
}

}  // namespace

GgufStreamWriter::GgufStreamWriter(std::string path) : path_(std::move(path)), tmp_path_(path_ + ".tmp") {}

GgufStreamWriter::~GgufStreamWriter() {
  if (!file_) return;
  std::fclose(file_);
  std::remove(tmp_path_.c_str());
}

void GgufStreamWriter::set(std::string key, Value v) {
  if (began_) fail("GGUF writer: metadata key '{}' set after begin()", key);
  if (key == "general.alignment") fail("GGUF writer: the stream writer keeps the default alignment of 32");
  for (auto& [k, old] : kv_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(v));
}

void GgufStreamWriter::set_string(std::string key, std::string s) { set(std::move(key), string_value(std::move(s))); }

void GgufStreamWriter::set_u32(std::string key, uint32_t x) {
  Value v;
  v.type = ValueType::u32;
  v.u = x;
  set(std::move(key), std::move(v));
}

void GgufStreamWriter::set_f32(std::string key, float x) {
  Value v;
  v.type = ValueType::f32;
  v.f = x;
  set(std::move(key), std::move(v));
}

void GgufStreamWriter::set_bool(std::string key, bool x) {
  Value v;
  v.type = ValueType::boolean;
  v.u = x ? 1 : 0;
  set(std::move(key), std::move(v));
}

void GgufStreamWriter::set_string_array(std::string key, const std::vector<std::string>& items) {
  Value v;
  v.type = ValueType::array;
  v.elem_type = ValueType::string;
  v.array.reserve(items.size());
  for (const std::string& s : items) v.array.push_back(string_value(s));
  set(std::move(key), std::move(v));
}

void GgufStreamWriter::set_i32_array(std::string key, const std::vector<int32_t>& items) {
  Value v;
  v.type = ValueType::array;
  v.elem_type = ValueType::i32;
  v.array.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    v.array[i].type = ValueType::i32;
    v.array[i].i = items[i];
  }
  set(std::move(key), std::move(v));
}

uint64_t GgufStreamWriter::add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne) {
  if (began_) fail("GGUF writer: tensor '{}' declared after begin()", name);
  if (ne.empty() || ne.size() > 4) fail("GGUF writer: tensor '{}': {} dimensions (must be 1..4)", name, ne.size());
  if (!ggml_type_known(uint32_t(type))) fail("GGUF writer: tensor '{}': unknown type {}", name, uint32_t(type));
  if (std::any_of(tensors_.begin(), tensors_.end(), [&](const TensorDecl& t) { return t.name == name; }))
    fail("GGUF writer: duplicate tensor '{}'", name);
  uint64_t n = 1;
  for (uint64_t d : ne) {
    if (d == 0 || d > uint64_t(std::numeric_limits<int64_t>::max()) / n)
      fail("GGUF writer: tensor '{}': bad dimension {} in [{}]", name, d, fmt::join(ne, ", "));
    n *= d;
  }
  const uint64_t row_bytes = ggml_row_bytes(type, int64_t(ne[0])), rows = n / ne[0];
  if (row_bytes != 0 && rows > std::numeric_limits<uint64_t>::max() / row_bytes)
    fail("GGUF writer: tensor '{}': byte size overflows", name);
  const uint64_t n_bytes = row_bytes * rows;
  tensors_.push_back({std::move(name), type, std::move(ne), n_bytes});
  return n_bytes;
}

uint64_t GgufStreamWriter::data_bytes() const {
  uint64_t n = 0;
  for (const TensorDecl& t : tensors_) n += t.n_bytes;
  return n;
}

void GgufStreamWriter::emit(const void* p, size_t n) {
  if (n > 0 && std::fwrite(p, 1, n, file_) != n) fail("cannot write '{}': {}", tmp_path_, std::strerror(errno));
  written_ += n;
}

void GgufStreamWriter::emit_padding() {
  static const uint8_t zeros[256] = {};
  emit(zeros, size_t(align_up(written_, alignment_) - written_));
}

void GgufStreamWriter::emit_string(const std::string& s) {
  emit_scalar<uint64_t>(s.size());
  emit(s.data(), s.size());
}

void GgufStreamWriter::emit_value(const Value& v, ValueType t, const std::string& key) {
  if (v.type != t)
    fail("GGUF writer: metadata key '{}': {} value where {} was expected", key, value_type_name(v.type),
         value_type_name(t));
  switch (t) {
    case ValueType::u8: emit_scalar(narrow_u<uint8_t>(v.u, key)); break;
    case ValueType::u16: emit_scalar(narrow_u<uint16_t>(v.u, key)); break;
    case ValueType::u32: emit_scalar(narrow_u<uint32_t>(v.u, key)); break;
    case ValueType::u64: emit_scalar<uint64_t>(v.u); break;
    case ValueType::i8: emit_scalar(narrow_i<int8_t>(v.i, key)); break;
    case ValueType::i16: emit_scalar(narrow_i<int16_t>(v.i, key)); break;
    case ValueType::i32: emit_scalar(narrow_i<int32_t>(v.i, key)); break;
    case ValueType::i64: emit_scalar<int64_t>(v.i); break;
    case ValueType::f32: emit_scalar<float>(float(v.f)); break;
    case ValueType::f64: emit_scalar<double>(v.f); break;
    case ValueType::boolean: emit_scalar<uint8_t>(v.u ? 1 : 0); break;
    case ValueType::string: emit_string(v.s); break;
    case ValueType::array:
      emit_scalar<uint32_t>(uint32_t(v.elem_type));
      emit_scalar<uint64_t>(v.array.size());
      for (const Value& e : v.array) emit_value(e, v.elem_type, key);
      break;
    default: fail("GGUF writer: metadata key '{}': unknown value type {}", key, uint32_t(t));
  }
}

void GgufStreamWriter::begin() {
  if (began_) fail("GGUF writer: begin() called twice for '{}'", path_);
  began_ = true;
  // path.tmp is renamed over `path` at the end: that would replace a device such as
  // /dev/null with a regular file, and fail for a directory only after all the writing.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path_, ec);
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    fail("cannot write '{}': it exists and is not a regular file", path_);
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!file_) fail("cannot create '{}': {}", tmp_path_, std::strerror(errno));
  emit("GGUF", 4);
  emit_scalar<uint32_t>(3);
  emit_scalar<uint64_t>(tensors_.size());
  emit_scalar<uint64_t>(kv_.size());
  for (const auto& [key, v] : kv_) {
    emit_string(key);
    emit_scalar<uint32_t>(uint32_t(v.type));
    emit_value(v, v.type, key);
  }
  uint64_t offset = 0;
  for (const TensorDecl& t : tensors_) {
    emit_string(t.name);
    emit_scalar<uint32_t>(uint32_t(t.ne.size()));
    for (uint64_t d : t.ne) emit_scalar<uint64_t>(d);
    emit_scalar<uint32_t>(uint32_t(t.type));
    emit_scalar<uint64_t>(offset);
    offset = align_up(offset + t.n_bytes, alignment_);
  }
  emit_padding();
}

void GgufStreamWriter::write_data(const void* data, size_t n) {
  if (!file_) fail("GGUF writer: write_data() outside begin() .. finish() for '{}'", path_);
  if (n == 0) return;
  if (current_ >= tensors_.size()) fail("GGUF writer: {} bytes of data past the last tensor of '{}'", n, path_);
  const TensorDecl& t = tensors_[current_];
  if (n > t.n_bytes - current_written_)
    fail("GGUF writer: tensor '{}': {} bytes written where {} remain", t.name, n, t.n_bytes - current_written_);
  emit(data, n);
  current_written_ += n;
  if (current_written_ == t.n_bytes) {
    emit_padding();
    ++current_;
    current_written_ = 0;
  }
}

void GgufStreamWriter::finish() {
  if (!file_) fail("GGUF writer: finish() without begin() for '{}'", path_);
  if (current_ < tensors_.size())
    fail("GGUF writer: tensor '{}' got {} of its {} bytes", tensors_[current_].name, current_written_,
         tensors_[current_].n_bytes);
  std::FILE* f = std::exchange(file_, nullptr);
  if (std::fclose(f) != 0) {
    const int e = errno;
    std::remove(tmp_path_.c_str());
    fail("cannot write '{}': {}", tmp_path_, std::strerror(e));
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp_path_.c_str());
    fail("cannot rename '{}' to '{}': {}", tmp_path_, path_, std::strerror(e));
  }
}

}  // namespace oscar::gguf
