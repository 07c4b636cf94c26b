// PyTorch `.pt` files (torch.save's zip format) without Python: a value tree, a reader
// whose whitelist unpickler rebuilds tensors and refuses everything else, and a writer
// whose files torch.load(path, weights_only=True) reads back.
//
// Format (torch ≥ 1.6): a zip archive with one top-level folder <name>/ holding
//   data.pkl          pickle stream (protocol 2) of the object; tensors are
//                     torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
//                     requires_grad, backward_hooks) — or _rebuild_tensor_v3(..., dtype)
//                     for dtypes without a legacy storage class (uint16, float8, ...) —
//                     where storage is a persistent id
//                     ('storage', torch.FloatStorage | torch.storage.UntypedStorage, key,
//                      location, numel)
//   data/<key>        the storage's raw little-endian bytes
//   byteorder         "little";  version "3";  .format_version "1";
//   .storage_alignment "64";  .data/serialization_id (40 digits)
// torch aligns every record to 64 bytes with an "FB" extra field; the writer does too.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace oscar::pt {

enum class Dtype { f32, f64, f16, bf16, i64, i32, i16, i8, u8, boolean, c64, c128, u16, u32, u64, f8_e4m3fn, f8_e5m2 };
const char* dtype_name(Dtype d);  // torch's spelling: "float32", "bfloat16", "int64", ...
size_t dtype_size(Dtype d);       // bytes per element

// A tensor as read from (or to be written to) a file. The reader gathers the view
// (storage offset and strides as in the file) into a contiguous row-major copy; the
// writer ignores `strides` and `storage_offset` and writes `data` as a contiguous tensor.
struct Tensor {
  Dtype dtype = Dtype::f32;
  std::vector<int64_t> shape;    // outermost first; empty: a scalar
  std::vector<int64_t> strides;  // in elements, as in the file (informational)
  int64_t storage_offset = 0;    // in elements, as in the file (informational)
  bool requires_grad = false;
  std::vector<uint8_t> data;     // [numel · dtype_size] contiguous row-major, little-endian

  int64_t numel() const;         // product of shape (1 for a scalar)
  // float32/float64/float16/bfloat16 converted to f32 (float64 rounded); other dtypes
  // are refused with an error naming the dtype.
  std::vector<float> to_f32() const;
  // A contiguous float32 tensor; data.size() must equal the product of shape.
  static Tensor from_f32(std::span<const float> values, std::vector<int64_t> shape);
};

// The value tree of a pickled object: what torch.load(weights_only=True) can return
// for state dicts and RotationZoo files. Dict keys are int or string, in insertion
// order; an OrderedDict is a dict with ordered() true. Values copy cheaply: tensors
// are shared (immutable once made).
class Value {
 public:
  enum class Kind { none, boolean, integer, real, string, list, tuple, dict, tensor };

  Value() = default;  // None
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value real(double d);
  static Value string(std::string s);
  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items = {});
  static Value dict();
  static Value ordered_dict();
  static Value tensor(Tensor t);
  static Value shared_tensor(std::shared_ptr<const Tensor> t);

  Kind kind() const { return kind_; }
  const char* kind_name() const;  // "None", "bool", "int", "float", "str", "list", ...
  bool is_none() const { return kind_ == Kind::none; }
  bool is_dict() const { return kind_ == Kind::dict; }
  bool is_tensor() const { return kind_ == Kind::tensor; }

  // Accessors throw oscar::Error naming the expected and the actual kind.
  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;  // a float, or an int converted
  const std::string& as_string() const;
  const std::vector<Value>& items() const;  // list or tuple elements
  const Tensor& as_tensor() const;

  // Dicts. keys()[i] belongs to values()[i]; order is insertion order.
  bool ordered() const { return ordered_; }
  const std::vector<Value>& keys() const;
  const std::vector<Value>& values() const;
  const Value* find(std::string_view key) const;  // nullptr when absent
  const Value* find(int64_t key) const;
  const Value& at(std::string_view key) const;    // throws naming the missing key
  void set(Value key, Value value);               // key: int or string; replaces an equal key
  void push_back(Value v);                        // lists and tuples

  size_t size() const;  // elements of a list/tuple, entries of a dict; else 0
  // Deep equality (tensors by dtype, shape and bytes; ordered-ness of dicts ignored).
  bool operator==(const Value& o) const;

 private:
  Kind kind_ = Kind::none;
  bool ordered_ = false;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0.0;
  std::string s_;
  std::vector<Value> items_;   // list/tuple elements; dict keys
  std::vector<Value> values_;  // dict values
  std::shared_ptr<const Tensor> tensor_;
};

// Bounds the reader enforces on untrusted files (each exceeded bound is an oscar::Error).
struct Limits {
  uint64_t max_pickle_bytes = 256ull << 20;   // data.pkl
  uint64_t max_stack = 1u << 20;               // unpickler stack + mark depth
  uint64_t max_memo = 1u << 20;                // memo entries
  int max_depth = 512;                         // nesting of containers
  uint64_t max_values = 16u << 20;             // values in the resulting tree
  uint64_t max_dims = 64;                      // tensor rank
  // Tensor bytes gathered in total may not exceed 4 × the storage bytes read + this
  // slack (views may overlap, but not without bound).
  uint64_t tensor_bytes_slack = 64ull << 20;
  uint64_t max_entry_bytes = 64ull << 30;      // one zip entry, uncompressed
};

// Reads a .pt file; errors name the path and what is wrong.
Value load(const std::string& path, const Limits& limits = {});
// Reads an in-memory .pt image (tests, fuzzing).
Value load_bytes(std::span<const uint8_t> bytes, const std::string& name_for_errors, const Limits& limits = {});

// Writes `v` as torch.save would. `archive_name` is the top-level folder; empty: the
// file's stem (torch's choice). Tensors are written contiguous, one storage each.
// Refuses values torch.load(weights_only=True) could not read back (dict keys other
// than int/string) and files past 4 GiB (no zip64).
void save(const Value& v, const std::string& path, std::string archive_name = "");
std::vector<uint8_t> save_bytes(const Value& v, const std::string& archive_name);

// The pickle layer alone (exposed for tests). `storage_bytes(key)` returns the bytes of
// <name>/data/<key> (or throws).
struct StorageSource {
  virtual ~StorageSource() = default;
  virtual std::shared_ptr<const std::vector<uint8_t>> storage_bytes(const std::string& key) = 0;
};
Value unpickle(std::span<const uint8_t> pickle, StorageSource& storages, const Limits& limits = {});
// Pickles `v`, appending each tensor's bytes to `storages` (key = index as a string);
// the spans point into `v`'s tensors.
std::vector<uint8_t> pickle(const Value& v, std::vector<std::span<const uint8_t>>& storages);

}  // namespace oscar::pt
