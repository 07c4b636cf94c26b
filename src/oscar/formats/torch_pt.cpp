// .pt files: the value tree, and the zip layer around the pickle reader and writer.
#include "oscar/formats/torch_pt.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "oscar/core/dtype.h"
#include "oscar/core/error.h"
#include "oscar/core/mapped_file.h"
#include "oscar/formats/zip_archive.h"

namespace oscar::pt {

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::f32: return "float32";
    case Dtype::f64: return "float64";
    case Dtype::f16: return "float16";
    case Dtype::bf16: return "bfloat16";
    case Dtype::i64: return "int64";
    case Dtype::i32: return "int32";
    case Dtype::i16: return "int16";
    case Dtype::i8: return "int8";
    case Dtype::u8: return "uint8";
    case Dtype::boolean: return "bool";
    case Dtype::c64: return "complex64";
    case Dtype::c128: return "complex128";
    case Dtype::u16: return "uint16";
    case Dtype::u32: return "uint32";
    case Dtype::u64: return "uint64";
    case Dtype::f8_e4m3fn: return "float8_e4m3fn";
    case Dtype::f8_e5m2: return "float8_e5m2";
  }
  return "?";
}

size_t dtype_size(Dtype d) {
  switch (d) {
    case Dtype::f64: case Dtype::i64: case Dtype::u64: case Dtype::c64: return 8;
    case Dtype::c128: return 16;
    case Dtype::f32: case Dtype::i32: case Dtype::u32: return 4;
    case Dtype::f16: case Dtype::bf16: case Dtype::i16: case Dtype::u16: return 2;
    case Dtype::i8: case Dtype::u8: case Dtype::boolean: case Dtype::f8_e4m3fn: case Dtype::f8_e5m2: return 1;
  }
  return 1;
}

// ---- Tensor ----------------------------------------------------------------------

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::vector<float> Tensor::to_f32() const {
  const size_t n = static_cast<size_t>(numel());
  if (data.size() != n * dtype_size(dtype))
    fail("tensor data holds {} bytes, but shape and dtype {} need {}", data.size(), dtype_name(dtype), n * dtype_size(dtype));
  std::vector<float> out(n);
  switch (dtype) {
    case Dtype::f32:
      if (n) std::memcpy(out.data(), data.data(), n * 4);
      return out;
    case Dtype::f64:
      for (size_t i = 0; i < n; ++i) {
        double x;
        std::memcpy(&x, data.data() + 8 * i, 8);
        out[i] = static_cast<float>(x);
      }
      return out;
    case Dtype::f16:
    case Dtype::bf16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data.data() + 2 * i, 2);
        out[i] = dtype == Dtype::f16 ? fp16_to_f32(fp16{h}) : bf16_to_f32(bf16{h});
      }
      return out;
    default:
      fail("tensor of dtype {} cannot be read as float32", dtype_name(dtype));
  }
}

Tensor Tensor::from_f32(std::span<const float> values, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = Dtype::f32;
  t.shape = std::move(shape);
  const int64_t n = t.numel();
  OSCAR_CHECK(n >= 0 && static_cast<size_t>(n) == values.size(), "{} values for a shape of {} elements", values.size(), n);
  t.strides.assign(t.shape.size(), 1);
  for (size_t i = t.shape.size(); i-- > 1;) t.strides[i - 1] = t.strides[i] * t.shape[i];
  t.data.resize(values.size() * 4);
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

// ---- Value -----------------------------------------------------------------------

Value Value::boolean(bool b) { Value v; v.kind_ = Kind::boolean; v.b_ = b; return v; }
Value Value::integer(int64_t i) { Value v; v.kind_ = Kind::integer; v.i_ = i; return v; }
Value Value::real(double d) { Value v; v.kind_ = Kind::real; v.d_ = d; return v; }
Value Value::string(std::string s) { Value v; v.kind_ = Kind::string; v.s_ = std::move(s); return v; }
Value Value::list(std::vector<Value> items) { Value v; v.kind_ = Kind::list; v.items_ = std::move(items); return v; }
Value Value::tuple(std::vector<Value> items) { Value v; v.kind_ = Kind::tuple; v.items_ = std::move(items); return v; }
Value Value::dict() { Value v; v.kind_ = Kind::dict; return v; }
Value Value::ordered_dict() { Value v; v.kind_ = Kind::dict; v.ordered_ = true; return v; }
Value Value::tensor(Tensor t) { return shared_tensor(std::make_shared<const Tensor>(std::move(t))); }
Value Value::shared_tensor(std::shared_ptr<const Tensor> t) {
  OSCAR_CHECK(t != nullptr, "null tensor");
  Value v;
  v.kind_ = Kind::tensor;
  v.tensor_ = std::move(t);
  return v;
}

const char* Value::kind_name() const {
  switch (kind_) {
    case Kind::none: return "None";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::real: return "float";
    case Kind::string: return "str";
    case Kind::list: return "list";
    case Kind::tuple: return "tuple";
    case Kind::dict: return ordered_ ? "OrderedDict" : "dict";
    case Kind::tensor: return "tensor";
  }
  return "?";
}

namespace {
[[noreturn]] void wrong_kind(const char* want, const Value& v) { fail("expected {}, got {}", want, v.kind_name()); }
}  // namespace

bool Value::as_bool() const {
  if (kind_ != Kind::boolean) wrong_kind("bool", *this);
  return b_;
}
int64_t Value::as_int() const {
  if (kind_ != Kind::integer) wrong_kind("int", *this);
  return i_;
}
double Value::as_double() const {
  if (kind_ == Kind::integer) return static_cast<double>(i_);
  if (kind_ != Kind::real) wrong_kind("float", *this);
  return d_;
}
const std::string& Value::as_string() const {
  if (kind_ != Kind::string) wrong_kind("str", *this);
  return s_;
}
const std::vector<Value>& Value::items() const {
  if (kind_ != Kind::list && kind_ != Kind::tuple) wrong_kind("list or tuple", *this);
  return items_;
}
const Tensor& Value::as_tensor() const {
  if (kind_ != Kind::tensor) wrong_kind("tensor", *this);
  return *tensor_;
}
const std::vector<Value>& Value::keys() const {
  if (kind_ != Kind::dict) wrong_kind("dict", *this);
  return items_;
}
const std::vector<Value>& Value::values() const {
  if (kind_ != Kind::dict) wrong_kind("dict", *this);
  return values_;
}
const Value* Value::find(std::string_view key) const {
  for (size_t i = 0; i < keys().size(); ++i)
    if (items_[i].kind_ == Kind::string && items_[i].s_ == key) return &values_[i];
  return nullptr;
}
const Value* Value::find(int64_t key) const {
  for (size_t i = 0; i < keys().size(); ++i)
    if (items_[i].kind_ == Kind::integer && items_[i].i_ == key) return &values_[i];
  return nullptr;
}
const Value& Value::at(std::string_view key) const {
  const Value* v = find(key);
  if (!v) fail("key '{}' is missing", key);
  return *v;
}
void Value::set(Value key, Value value) {
  if (kind_ != Kind::dict) wrong_kind("dict", *this);
  if (key.kind_ != Kind::integer && key.kind_ != Kind::string) fail("dict key of type {} (int or str only)", key.kind_name());
  for (size_t i = 0; i < items_.size(); ++i) {
    if (items_[i].kind_ == key.kind_ && (key.kind_ == Kind::integer ? items_[i].i_ == key.i_ : items_[i].s_ == key.s_)) {
      values_[i] = std::move(value);
      return;
    }
  }
  items_.push_back(std::move(key));
  values_.push_back(std::move(value));
}
void Value::push_back(Value v) {
  if (kind_ != Kind::list && kind_ != Kind::tuple) wrong_kind("list or tuple", *this);
  items_.push_back(std::move(v));
}
size_t Value::size() const {
  return (kind_ == Kind::list || kind_ == Kind::tuple || kind_ == Kind::dict) ? items_.size() : 0;
}

bool Value::operator==(const Value& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::none: return true;
    case Kind::boolean: return b_ == o.b_;
    case Kind::integer: return i_ == o.i_;
    case Kind::real: return d_ == o.d_ || (d_ != d_ && o.d_ != o.d_);
    case Kind::string: return s_ == o.s_;
    case Kind::list:
    case Kind::tuple: return items_ == o.items_;
    case Kind::dict: return items_ == o.items_ && values_ == o.values_;
    case Kind::tensor:
      return tensor_->dtype == o.tensor_->dtype && tensor_->shape == o.tensor_->shape && tensor_->data == o.tensor_->data;
  }
  return false;
}

// ---- reading ---------------------------------------------------------------------

namespace {

class ZipStorages : public StorageSource {
 public:
  ZipStorages(const zip::Reader& r, std::string prefix, const Limits& lim) : r_(r), prefix_(std::move(prefix)), lim_(lim) {}
  std::shared_ptr<const std::vector<uint8_t>> storage_bytes(const std::string& key) override {
    const std::string name = prefix_ + "data/" + key;
    if (!r_.contains(name)) fail("storage record '{}' is missing from the archive", name);
    return std::make_shared<const std::vector<uint8_t>>(r_.read(name, lim_.max_entry_bytes));
  }

 private:
  const zip::Reader& r_;
  std::string prefix_;
  const Limits& lim_;
};

Value load_archive(std::span<const uint8_t> bytes, const std::string& name, const Limits& limits) {
  zip::Reader r(bytes, name);
  // The one top-level folder holding data.pkl (torch names it after the file's stem,
  // but any name is accepted, as torch.load does).
  std::string prefix;
  int found = 0;
  for (const std::string& e : r.names()) {
    const size_t slash = e.find('/');
    if (slash != std::string::npos && slash > 0 && e.substr(slash) == "/data.pkl") {
      prefix = e.substr(0, slash + 1);
      ++found;
    }
  }
  if (found == 0) fail("no <name>/data.pkl in the archive (not a torch.save file?)");
  if (found > 1) fail("{} top-level folders hold a data.pkl; expected one", found);
  if (r.contains(prefix + "byteorder")) {
    const std::vector<uint8_t> bo = r.read(prefix + "byteorder", 64);
    const std::string s(bo.begin(), bo.end());
    if (s != "little") fail("byteorder '{}' is not supported (only little-endian files)", s);
  }
  const std::vector<uint8_t> pkl = r.read(prefix + "data.pkl", limits.max_pickle_bytes);
  ZipStorages storages(r, prefix, limits);
  return unpickle(pkl, storages, limits);
}

}  // namespace

Value load_bytes(std::span<const uint8_t> bytes, const std::string& name_for_errors, const Limits& limits) {
  try {
    return load_archive(bytes, name_for_errors, limits);
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(name_for_errors + ":", 0) == 0) throw;
    throw Error(name_for_errors + ": " + msg);
  } catch (const std::bad_alloc&) {
    fail("{}: out of memory while reading (sizes in the file too large?)", name_for_errors);
  }
}

Value load(const std::string& path, const Limits& limits) {
  MappedFile f(path);
  return load_bytes(std::span<const uint8_t>(f.data(), f.size()), path, limits);
}

// ---- writing ---------------------------------------------------------------------

namespace {

uint64_t fnv1a(std::span<const uint8_t> b, uint64_t h) {
  for (uint8_t x : b) h = (h ^ x) * 0x100000001b3ull;
  return h;
}

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

std::vector<uint8_t> save_bytes(const Value& v, const std::string& archive_name) {
  if (archive_name.empty() || archive_name.find('/') != std::string::npos)
    fail("bad archive name '{}' (non-empty, no '/')", archive_name);
  std::vector<std::span<const uint8_t>> storages;
  const std::vector<uint8_t> pkl = pickle(v, storages);
  // serialization_id: 40 decimal digits, as torch writes; derived from the content here
  // so that the output is deterministic.
  uint64_t h1 = fnv1a(pkl, 0xcbf29ce484222325ull), h2 = fnv1a(pkl, 0x84222325cbf29ce4ull);
  for (const auto& s : storages) {
    h1 = fnv1a(s, h1);
    h2 = fnv1a(s, h2 ^ 0x9e3779b97f4a7c15ull);
  }
  const std::string serialization_id = fmt::format("{:020}{:020}", h1 % 10000000000000000000ull, h2 % 10000000000000000000ull);
  const std::string root = archive_name + "/";
  static const std::string format_version = "1", alignment = "64", byteorder = "little", version = "3\n";
  std::vector<zip::Entry> entries;
  entries.push_back({root + "data.pkl", pkl});
  entries.push_back({root + ".format_version", bytes_of(format_version)});
  entries.push_back({root + ".storage_alignment", bytes_of(alignment)});
  entries.push_back({root + "byteorder", bytes_of(byteorder)});
  for (size_t i = 0; i < storages.size(); ++i) entries.push_back({root + "data/" + std::to_string(i), storages[i]});
  entries.push_back({root + "version", bytes_of(version)});
  entries.push_back({root + ".data/serialization_id", bytes_of(serialization_id)});
  return zip::write_stored(entries, 64);
}

void save(const Value& v, const std::string& path, std::string archive_name) {
  if (archive_name.empty()) archive_name = std::filesystem::path(path).stem().string();
  if (archive_name.empty()) archive_name = "archive";
  const std::vector<uint8_t> bytes = save_bytes(v, archive_name);
  // Write to a temporary name and rename, so a reader never sees half a file.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("{}: cannot create: {}", tmp, std::strerror(errno));
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) fail("{}: write failed: {}", tmp, std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("{}: cannot rename from {}: {}", path, tmp, ec.message());
}

}  // namespace oscar::pt
