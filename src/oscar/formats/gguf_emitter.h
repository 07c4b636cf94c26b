// The GGUF byte encoding shared by GgufWriter (in memory) and GgufStreamWriter (to a
// file): scalars little-endian as the host stores them, strings as u64 length + bytes,
// metadata values by type with range checks. Internal to src/oscar/formats.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "oscar/core/error.h"
#include "oscar/formats/gguf.h"

namespace oscar::gguf::detail {

inline uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Appends bytes to a vector or streams them to a file; the layout code is shared.
using Sink = std::function<void(const void*, size_t)>;

class Emitter {
 public:
  explicit Emitter(Sink sink) : sink_(std::move(sink)) {}
  uint64_t written() const { return written_; }

  void bytes(const void* p, size_t n) {
    if (n) sink_(p, n);
    written_ += n;
  }
  template <typename T>
  void put(T v) { bytes(&v, sizeof v); }
  void string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    static const uint8_t zeros[256] = {};
    uint64_t n = align_up(written_, alignment) - written_;
    while (n > 0) {
      const size_t k = size_t(std::min<uint64_t>(n, sizeof zeros));
      bytes(zeros, k);
      n -= k;
    }
  }

  // Writes the payload of `v` (no type tag), which must be of type `t`.
  void value(const Value& v, ValueType t, const std::string& key) {
    if (v.type != t)
      fail("GGUF writer: metadata key '{}': {} value where {} was expected", key, value_type_name(v.type),
           value_type_name(t));
    switch (t) {
      case ValueType::u8: put(narrow_u<uint8_t>(v.u, key)); break;
      case ValueType::u16: put(narrow_u<uint16_t>(v.u, key)); break;
      case ValueType::u32: put(narrow_u<uint32_t>(v.u, key)); break;
      case ValueType::u64: put<uint64_t>(v.u); break;
      case ValueType::i8: put(narrow_i<int8_t>(v.i, key)); break;
      case ValueType::i16: put(narrow_i<int16_t>(v.i, key)); break;
      case ValueType::i32: put(narrow_i<int32_t>(v.i, key)); break;
      case ValueType::i64: put<int64_t>(v.i); break;
      case ValueType::f32: put<float>(float(v.f)); break;
      case ValueType::f64: put<double>(v.f); break;
      case ValueType::boolean: put<uint8_t>(v.u ? 1 : 0); break;
      case ValueType::string: string(v.s); break;
      case ValueType::array:
        put<uint32_t>(uint32_t(v.elem_type));
        put<uint64_t>(v.array.size());
        for (const Value& e : v.array) value(e, v.elem_type, key);
        break;
      default: fail("GGUF writer: metadata key '{}': unknown value type {}", key, uint32_t(t));
    }
  }

 private:
  template <typename T>
  static T narrow_u(uint64_t x, const std::string& key) {
    if (x > std::numeric_limits<T>::max()) fail("GGUF writer: metadata key '{}': {} does not fit", key, x);
    return T(x);
  }
  template <typename T>
  static T narrow_i(int64_t x, const std::string& key) {
    if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
      fail("GGUF writer: metadata key '{}': {} does not fit", key, x);
    return T(x);
  }

  Sink sink_;
  uint64_t written_ = 0;
};

// A tensor a writer is given: 1..4 dimensions, a known type, a byte size that does not
// overflow (throws oscar::Error naming the tensor); returns that byte size.
uint64_t checked_tensor_bytes(const std::string& name, GgmlType type, const std::vector<uint64_t>& ne);

// Magic, version 3, counts, metadata in order, and the tensor infos (each offset from the
// data section, every tensor's data padded to `alignment`, of bytes_of(t) bytes), padded
// to the alignment: everything before the first tensor's data.
template <typename Tensors, typename BytesOf>
void emit_header(Emitter& out, const std::vector<std::pair<std::string, Value>>& kv, const Tensors& tensors,
                 uint64_t alignment, BytesOf bytes_of) {
  out.bytes("GGUF", 4);
  out.put<uint32_t>(3);
  out.put<uint64_t>(tensors.size());
  out.put<uint64_t>(kv.size());
  for (const auto& [key, v] : kv) {
    out.string(key);
    out.put<uint32_t>(uint32_t(v.type));
    out.value(v, v.type, key);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    out.string(t.name);
    out.put<uint32_t>(uint32_t(t.ne.size()));
    for (uint64_t d : t.ne) out.put<uint64_t>(d);
    out.put<uint32_t>(uint32_t(t.type));
    out.put<uint64_t>(offset);
    offset = align_up(offset + bytes_of(t), alignment);
  }
  out.pad_to(alignment);
}

}  // namespace oscar::gguf::detail
