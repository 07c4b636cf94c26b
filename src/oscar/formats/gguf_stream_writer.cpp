// The layout is GgufWriter's (the header from gguf_emitter.h): magic, version 3, counts, metadata,
// tensor infos with offsets relative to the data section, padding, then each tensor's
// data padded to the alignment. Offsets are known up front because every tensor's size
// is declared before begin(), which is what lets the data follow as a stream.
#include "oscar/formats/gguf_stream_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "oscar/core/error.h"

namespace oscar::gguf {
namespace {

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
  const uint64_t n_bytes = detail::checked_tensor_bytes(name, type, ne);
  if (std::any_of(tensors_.begin(), tensors_.end(), [&](const TensorDecl& t) { return t.name == name; }))
    fail("GGUF writer: duplicate tensor '{}'", name);
  tensors_.push_back({std::move(name), type, std::move(ne), n_bytes});
  return n_bytes;
}

uint64_t GgufStreamWriter::data_bytes() const {
  uint64_t n = 0;
  for (const TensorDecl& t : tensors_) n += t.n_bytes;
  return n;
}

void GgufStreamWriter::write_file(const void* p, size_t n) {
  if (std::fwrite(p, 1, n, file_) != n) fail("cannot write '{}': {}", tmp_path_, std::strerror(errno));
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
  detail::emit_header(out_, kv_, tensors_, alignment_, [](const TensorDecl& t) { return t.n_bytes; });
}

void GgufStreamWriter::write_data(const void* data, size_t n) {
  if (!file_) fail("GGUF writer: write_data() outside begin() .. finish() for '{}'", path_);
  if (n == 0) return;
  if (current_ >= tensors_.size()) fail("GGUF writer: {} bytes of data past the last tensor of '{}'", n, path_);
  const TensorDecl& t = tensors_[current_];
  if (n > t.n_bytes - current_written_)
    fail("GGUF writer: tensor '{}': {} bytes written where {} remain", t.name, n, t.n_bytes - current_written_);
  out_.bytes(data, n);
  current_written_ += n;
  if (current_written_ == t.n_bytes) {
    out_.pad_to(alignment_);
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
