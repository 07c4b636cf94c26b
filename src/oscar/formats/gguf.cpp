// GGUF reader. The layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv,
// n_kv × (string key, u32 type, value), n_tensors × (string name, u32 n_dims,
// u64 ne[n_dims], u32 ggml type, u64 offset), padding to `general.alignment`, data.
// Strings are u64 length + bytes; arrays are u32 element type + u64 count + elements.
// Every read is bounds-checked, and every count is checked against the bytes that remain
// before anything is allocated for it.
#include "oscar/formats/gguf.h"

#include <cstring>
#include <limits>

#include "oscar/core/error.h"

namespace oscar::gguf {
namespace {

constexpr int max_array_depth = 8;  // nested arrays: real files use none
// All array elements of one file together: about 100 bytes of Value each, so this caps
// metadata at ~1 GB even for a hostile file; real vocabularies hold a few 100k entries.
constexpr uint64_t max_array_elements = uint64_t(1) << 23;
constexpr uint64_t max_alignment = uint64_t(1) << 30;
// Real files hold tens of keys and at most tens of thousands of tensors; the caps keep a
// hostile multi-GB file from turning its counts into GBs of parsed objects.
constexpr uint64_t max_kv = uint64_t(1) << 20;
constexpr uint64_t max_tensors = uint64_t(1) << 20;

// Smallest encoding of one value of type t (arrays and strings: their length fields).
uint64_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::boolean: return 1;
    case ValueType::u16:
    case ValueType::i16: return 2;
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::f32: return 4;
    case ValueType::u64:
    case ValueType::i64:
    case ValueType::f64:
    case ValueType::string: return 8;
    case ValueType::array: return 4 + 8;
  }
  return 0;
}

bool value_type_known(uint32_t raw) { return raw <= uint32_t(ValueType::f64); }

class Parser {
 public:
  Parser(const uint8_t* p, size_t size, const std::string& file) : p_(p), size_(size), file_(file) {}

  size_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
    fail("{}: {}", file_, fmt::format(f, std::forward<Args>(args)...));
  }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      error("{}: needs {} bytes at offset {}, but the file has only {} left", what, n, pos_, remaining());
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    const uint64_t n = read<uint64_t>(what);
    if (n > remaining())
      error("{}: string length {} at offset {} exceeds the {} bytes left in the file", what, n, pos_ - 8,
            remaining());
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(n));
    pos_ += size_t(n);
    return s;
  }

  // `what` names the key for errors ("metadata key 'x'"); built once per key, not per element.
  Value read_value(ValueType t, const std::string& what, int depth) {
    Value v;
    v.type = t;
    switch (t) {
      case ValueType::u8: v.u = read<uint8_t>(what); break;
      case ValueType::u16: v.u = read<uint16_t>(what); break;
      case ValueType::u32: v.u = read<uint32_t>(what); break;
      case ValueType::u64: v.u = read<uint64_t>(what); break;
      case ValueType::i8: v.i = read<int8_t>(what); break;
      case ValueType::i16: v.i = read<int16_t>(what); break;
      case ValueType::i32: v.i = read<int32_t>(what); break;
      case ValueType::i64: v.i = read<int64_t>(what); break;
      case ValueType::f32: v.f = read<float>(what); break;
      case ValueType::f64: v.f = read<double>(what); break;
      case ValueType::boolean: {
        const uint8_t b = read<uint8_t>(what);
        if (b > 1) error("{}: bool value {} is neither 0 nor 1", what, b);
        v.u = b;
        break;
      }
      case ValueType::string: v.s = read_string(what); break;
      case ValueType::array: read_array(v, what, depth); break;
    }
    return v;
  }

  ValueType read_value_type(std::string_view what) {
    const uint32_t raw = read<uint32_t>(what);
    if (!value_type_known(raw)) error("{}: unknown value type {}", what, raw);
    return ValueType(raw);
  }

 private:
  void read_array(Value& v, const std::string& what, int depth) {
    if (depth >= max_array_depth) error("{}: arrays nested deeper than {}", what, max_array_depth);
    v.elem_type = read_value_type(what + " (array element type)");
    const uint64_t n = read<uint64_t>(what + " (array length)");
    // The count must be payable from the bytes left before anything is reserved for it.
    if (n > remaining() / min_value_bytes(v.elem_type))
      error("{}: array of {} {} values cannot fit in the {} bytes left in the file", what, n,
            value_type_name(v.elem_type), remaining());
    if (n > max_array_elements - array_elements_)
      error("{}: array of {} values exceeds the limit of {} array elements per file", what, n,
            max_array_elements);
    array_elements_ += n;
    v.array.reserve(size_t(n));
    for (uint64_t k = 0; k < n; ++k) v.array.push_back(read_value(v.elem_type, what, depth + 1));
  }

  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& file_;
  uint64_t array_elements_ = 0;
};

uint64_t read_alignment(const Parser& in, const Value* v) {
  if (!v) return 32;
  if (!v->is_integer()) in.error("general.alignment is {}, expected an integer", value_type_name(v->type));
  const int64_t a = v->as_int("general.alignment");
  if (a <= 0 || uint64_t(a) > max_alignment || (uint64_t(a) & (uint64_t(a) - 1)) != 0)
    in.error("general.alignment = {} must be a nonzero power of two up to {}", a, max_alignment);
  return uint64_t(a);
}

TensorInfo read_tensor_info(Parser& in, uint64_t index, uint64_t alignment) {
  TensorInfo t;
  t.name = in.read_string(fmt::format("tensor #{} name", index));
  const std::string what = fmt::format("tensor '{}'", t.name);
  const uint32_t n_dims = in.read<uint32_t>(what + " n_dims");
  if (n_dims < 1 || n_dims > 4) in.error("{}: n_dims = {} (must be 1..4)", what, n_dims);
  uint64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t ne = in.read<uint64_t>(what + " ne");
    if (ne == 0) in.error("{}: ne[{}] = 0", what, d);
    if (ne > uint64_t(std::numeric_limits<int64_t>::max()) / n_elements)
      in.error("{}: element count overflows (ne[{}] = {})", what, d, ne);
    n_elements *= ne;
    t.ne.push_back(ne);
  }
  t.n_elements = n_elements;
  const uint32_t raw_type = in.read<uint32_t>(what + " type");
  if (!ggml_type_known(raw_type)) in.error("{}: unknown ggml type {}", what, raw_type);
  t.type = GgmlType(raw_type);
  const int64_t block = ggml_block_elements(t.type);
  if (t.ne[0] % uint64_t(block) != 0)
    in.error("{}: ne[0] = {} is not a multiple of the {} block size {}", what, t.ne[0], ggml_type_name(t.type),
             block);
  const uint64_t row_bytes = ggml_row_bytes(t.type, int64_t(t.ne[0]));
  const uint64_t rows = n_elements / t.ne[0];
  if (rows > std::numeric_limits<uint64_t>::max() / row_bytes) in.error("{}: byte size overflows", what);
  t.n_bytes = rows * row_bytes;
  t.offset = in.read<uint64_t>(what + " offset");
  if (t.offset % alignment != 0) in.error("{}: offset {} is not a multiple of the alignment {}", what, t.offset, alignment);
  return t;
}

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  auto map = std::make_shared<MappedFile>(path);
  GgufFile f = parse(map->data(), map->size(), path);
  f.map_ = std::move(map);
  return f;
}

GgufFile GgufFile::parse(const uint8_t* bytes, size_t size, std::string name_for_errors) {
  GgufFile f;
  f.path_ = std::move(name_for_errors);
  Parser in(bytes, size, f.path_);

  in.need(4, "header magic");
  if (std::memcmp(bytes, "GGUF", 4) != 0) in.error("bad magic (not a GGUF file)");
  in.read<uint32_t>("header magic");
  f.version_ = in.read<uint32_t>("header version");
  if (f.version_ != 2 && f.version_ != 3) {
    if (__builtin_bswap32(f.version_) == 2 || __builtin_bswap32(f.version_) == 3)
      in.error("big-endian GGUF files are not supported");
    in.error("unsupported GGUF version {} (supported: 2, 3)", f.version_);
  }
  const uint64_t n_tensors = in.read<uint64_t>("header tensor count");
  const uint64_t n_kv = in.read<uint64_t>("header metadata count");
  // Smallest possible entries: a key/name length, a type and one byte of value; a tensor
  // info with one dimension. Counts that these could not fit are rejected up front.
  constexpr uint64_t min_kv_bytes = 8 + 4 + 1, min_tensor_bytes = 8 + 4 + 8 + 4 + 8;
  if (n_kv > in.remaining() / min_kv_bytes)
    in.error("metadata count {} cannot fit in the {} bytes after the header", n_kv, in.remaining());
  if (n_tensors > (in.remaining() - n_kv * min_kv_bytes) / min_tensor_bytes)
    in.error("tensor count {} cannot fit in the {} bytes after the header", n_tensors, in.remaining());
  if (n_kv > max_kv) in.error("metadata count {} exceeds the limit of {}", n_kv, max_kv);
  if (n_tensors > max_tensors) in.error("tensor count {} exceeds the limit of {}", n_tensors, max_tensors);

  f.kv_.reserve(size_t(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = in.read_string(fmt::format("metadata key #{}", k));
    if (f.kv_index_.count(key)) in.error("duplicate metadata key '{}'", key);
    const std::string what = fmt::format("metadata key '{}'", key);
    const ValueType t = in.read_value_type(what + " type");
    Value v = in.read_value(t, what, 0);
    f.kv_index_.emplace(key, f.kv_.size());
    f.kv_.emplace_back(std::move(key), std::move(v));
  }
  f.alignment_ = read_alignment(in, f.find("general.alignment"));

  f.tensors_.reserve(size_t(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorInfo t = read_tensor_info(in, k, f.alignment_);
    if (f.tensor_index_.count(t.name)) in.error("duplicate tensor name '{}'", t.name);
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // pos <= size < 2^64 - alignment, so rounding up cannot overflow.
  f.data_offset_ = (uint64_t(in.pos()) + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  for (TensorInfo& t : f.tensors_) {
    if (f.data_offset_ > size || t.offset > size - f.data_offset_ || t.n_bytes > size - f.data_offset_ - t.offset)
      in.error("tensor '{}': offset {} + size {} (data section at {}) exceeds file size {}", t.name, t.offset,
               t.n_bytes, f.data_offset_, size);
    t.data = bytes + f.data_offset_ + t.offset;
  }
  return f;
}

const Value* GgufFile::find(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const Value& GgufFile::get(std::string_view key) const {
  const Value* v = find(key);
  if (!v) fail("{}: missing metadata key '{}'", path_, key);
  return *v;
}

namespace {

// Runs a typed accessor, prefixing its error with the file name.
template <typename F>
auto with_file(const std::string& path, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
}

template <typename T, typename F>
std::vector<T> array_of(const std::string& path, const Value& v, std::string_view key, F&& elem) {
  if (v.type != ValueType::array)
    fail("{}: metadata key '{}' is {}, expected an array", path, key, value_type_name(v.type));
  std::vector<T> out;
  out.reserve(v.array.size());
  with_file(path, [&] {
    for (const Value& e : v.array) out.push_back(elem(e));
    return 0;
  });
  return out;
}

}  // namespace

std::string GgufFile::get_string(std::string_view key) const {
  const Value& v = get(key);
  return with_file(path_, [&] { return v.as_string(key); });
}

std::string GgufFile::get_string(std::string_view key, std::string fallback) const {
  const Value* v = find(key);
  return v ? with_file(path_, [&] { return v->as_string(key); }) : fallback;
}

int64_t GgufFile::get_int(std::string_view key) const {
  const Value& v = get(key);
  return with_file(path_, [&] { return v.as_int(key); });
}

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const {
  const Value* v = find(key);
  return v ? with_file(path_, [&] { return v->as_int(key); }) : fallback;
}

double GgufFile::get_float(std::string_view key) const {
  const Value& v = get(key);
  return with_file(path_, [&] { return v.as_float(key); });
}

double GgufFile::get_float(std::string_view key, double fallback) const {
  const Value* v = find(key);
  return v ? with_file(path_, [&] { return v->as_float(key); }) : fallback;
}

bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  const Value* v = find(key);
  return v ? with_file(path_, [&] { return v->as_bool(key); }) : fallback;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  return array_of<std::string>(path_, get(key), key, [&](const Value& e) { return e.as_string(key); });
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  return array_of<int64_t>(path_, get(key), key, [&](const Value& e) { return e.as_int(key); });
}

std::vector<double> GgufFile::get_float_array(std::string_view key) const {
  return array_of<double>(path_, get(key), key, [&](const Value& e) { return e.as_float(key); });
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& GgufFile::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) fail("{}: missing tensor '{}'", path_, name);
  return *t;
}

std::vector<float> GgufFile::dequantize(const TensorInfo& t) const {
  if (!t.data) fail("{}: tensor '{}' has no data", path_, t.name);
  if (!ggml_type_dequantizable(t.type))
    fail("{}: tensor '{}': cannot dequantize type {}", path_, t.name, ggml_type_name(t.type));
  std::vector<float> out(size_t(t.n_elements));
  dequantize_row(t.type, t.data, out.data(), int64_t(t.n_elements));
  return out;
}

}  // namespace oscar::gguf
