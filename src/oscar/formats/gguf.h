// GGUF v2/v3 reader (mmap) and writer. Every count, size and offset read from a file
// is validated before use: a truncated, corrupt or hostile file raises oscar::Error
// naming the field, never crashes and never allocates without bound.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oscar/core/mapped_file.h"
#include "oscar/formats/ggml_type.h"

namespace oscar::gguf {

enum class ValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
const char* value_type_name(ValueType t);

// One metadata value. Scalars live in the matching field; arrays hold their elements
// (all of type `elem_type`) in `array`. Strings are raw bytes (UTF-8 by convention).
struct Value {
  ValueType type = ValueType::u8;
  uint64_t u = 0;     // u8/u16/u32/u64 and bool
  int64_t i = 0;      // i8/i16/i32/i64
  double f = 0.0;     // f32/f64
  std::string s;      // string
  ValueType elem_type = ValueType::u8;  // for arrays
  std::vector<Value> array;

  bool is_integer() const;
  bool is_float() const;
  int64_t as_int(std::string_view key_for_errors) const;    // any integer type (u64 > INT64_MAX fails); bool too
  double as_float(std::string_view key_for_errors) const;   // any number type
  bool as_bool(std::string_view key_for_errors) const;
  const std::string& as_string(std::string_view key_for_errors) const;
  std::string to_display(size_t max_array_items = 8) const;  // for `oscar inspect`
};

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  // GGUF order: ne[0] is the innermost (contiguous) dimension
  GgmlType type = GgmlType::f32;
  uint64_t offset = 0;       // relative to the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // points into the mapping (validated to lie inside it)
};

class GgufFile {
 public:
  // Maps and parses the file; throws oscar::Error naming the file and the bad field.
  static GgufFile open(const std::string& path);
  // Parses an in-memory image (used by tests and fuzzing); `bytes` must outlive the object.
  static GgufFile parse(const uint8_t* bytes, size_t size, std::string name_for_errors);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  const Value& get(std::string_view key) const;  // throws "missing metadata key 'x'"
  std::string get_string(std::string_view key) const;
  std::string get_string(std::string_view key, std::string fallback) const;
  int64_t get_int(std::string_view key) const;
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key) const;
  double get_float(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const TensorInfo& tensor(std::string_view name) const;  // throws naming the tensor
  // Whole tensor dequantized to f32 (n_elements values, ne[0] contiguous).
  std::vector<float> dequantize(const TensorInfo& t) const;
  // The mapping every TensorInfo::data points into (null for parse()d images): holding it
  // keeps tensor views valid after the GgufFile is gone.
  std::shared_ptr<const void> mapping() const { return map_; }

 private:
  std::shared_ptr<MappedFile> map_;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF v3 file: metadata in insertion order, then tensor infos, then aligned data.
class GgufWriter {
 public:
  void set(std::string key, Value v);  // replaces an existing key
  void set_string(std::string key, std::string v);
  void set_u32(std::string key, uint32_t v);
  void set_i32(std::string key, int32_t v);
  void set_f32(std::string key, float v);
  void set_bool(std::string key, bool v);
  void set_string_array(std::string key, const std::vector<std::string>& v);
  // `data` holds the tensor exactly as stored (already quantized for quant types);
  // its size must equal the size implied by `type` and `ne`.
  void add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne, std::vector<uint8_t> data);
  void set_alignment(uint64_t a);  // also written as general.alignment
  // Copies all metadata and tensors of `src` (for re-writing a model with additions).
  void copy_from(const GgufFile& src);
  void write(const std::string& path) const;  // writes to path.tmp then renames
  std::vector<uint8_t> to_bytes() const;

 private:
  struct PendingTensor { std::string name; GgmlType type; std::vector<uint64_t> ne; std::vector<uint8_t> data; };
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
  uint64_t alignment_ = 32;
};

}  // namespace oscar::gguf
