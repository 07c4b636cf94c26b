// Pickles a Value the way torch.save does (protocol 2): dicts as EMPTY_DICT + SETITEMS,
// OrderedDict through collections.OrderedDict(), tensors through
// torch._utils._rebuild_tensor_v2 with a persistent id naming a legacy storage class,
// or _rebuild_tensor_v3 with an UntypedStorage and a dtype for dtypes that have no
// storage class (uint16, uint32, uint64, float8). No memo: torch.load does not need it.
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "oscar/core/error.h"
#include "oscar/formats/torch_pt.h"

namespace oscar::pt {

namespace {

const char* storage_class(Dtype d) {  // nullptr: no legacy class, use UntypedStorage
  switch (d) {
    case Dtype::f32: return "FloatStorage";
    case Dtype::f64: return "DoubleStorage";
    case Dtype::f16: return "HalfStorage";
    case Dtype::bf16: return "BFloat16Storage";
    case Dtype::i64: return "LongStorage";
    case Dtype::i32: return "IntStorage";
    case Dtype::i16: return "ShortStorage";
    case Dtype::i8: return "CharStorage";
    case Dtype::u8: return "ByteStorage";
    case Dtype::boolean: return "BoolStorage";
    case Dtype::c64: return "ComplexFloatStorage";
    case Dtype::c128: return "ComplexDoubleStorage";
    default: return nullptr;
  }
}

class Pickler {
 public:
  explicit Pickler(std::vector<std::span<const uint8_t>>& storages) : storages_(storages) {}

  std::vector<uint8_t> run(const Value& v) {
    op(0x80);
    op(2);  // PROTO 2
    value(v, 0);
    op('.');
    return std::move(out_);
  }

 private:
  void op(uint8_t b) { out_.push_back(b); }
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(uint8_t(v >> (8 * i)));
  }
  void global(const char* module, const char* name) {
    op('c');
    out_.insert(out_.end(), module, module + std::strlen(module));
    op('\n');
    out_.insert(out_.end(), name, name + std::strlen(name));
    op('\n');
  }
  void integer(int64_t i) {
    if (i >= 0 && i < 256) {
      op('K');
      le(static_cast<uint64_t>(i), 1);
    } else if (i >= 0 && i < 65536) {
      op('M');
      le(static_cast<uint64_t>(i), 2);
    } else if (i >= INT32_MIN && i <= INT32_MAX) {
      op('J');
      le(static_cast<uint32_t>(static_cast<int32_t>(i)), 4);
    } else {
      // LONG1: minimal little-endian two's complement
      int n = 8;
      while (n > 1) {
        const int64_t shifted = i >> (8 * (n - 1) - 1);  // the top byte and the next sign bit
        if (shifted != 0 && shifted != -1) break;
        --n;
      }
      op(0x8a);
      op(uint8_t(n));
      le(static_cast<uint64_t>(i), n);
    }
  }
  void string(const std::string& s) {
    op('X');  // BINUNICODE (protocol 2 has no shorter form)
    if (s.size() > 0xffffffffu) fail("pickle writer: string of {} bytes", s.size());
    le(s.size(), 4);
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void ints_tuple(const std::vector<int64_t>& v) {
    if (v.empty()) { op(')'); return; }
    if (v.size() > 3) op('(');
    for (int64_t x : v) integer(x);
    op(v.size() == 1 ? 0x85 : v.size() == 2 ? 0x86 : v.size() == 3 ? 0x87 : 't');
  }
  void dict_items(const Value& d, int depth) {
    const auto& ks = d.keys();
    const auto& vs = d.values();
    for (size_t start = 0; start < ks.size(); start += 1000) {  // pickle batches 1000 items
      const size_t end = std::min(ks.size(), start + 1000);
      if (end - start == 1) {
        key(ks[start]);
        value(vs[start], depth + 1);
        op('s');
      } else {
        op('(');
        for (size_t i = start; i < end; ++i) {
          key(ks[i]);
          value(vs[i], depth + 1);
        }
        op('u');
      }
    }
  }
  void key(const Value& k) {
    if (k.kind() == Value::Kind::integer) integer(k.as_int());
    else if (k.kind() == Value::Kind::string) string(k.as_string());
    else fail("pickle writer: dict key of type {} (int or str only)", k.kind_name());
  }
  void tensor(const Tensor& t) {
    const size_t es = dtype_size(t.dtype);
    for (int64_t s : t.shape)
      if (s < 0) fail("pickle writer: negative tensor dimension {}", s);
    const int64_t numel = t.numel();
    if (t.data.size() != static_cast<size_t>(numel) * es)
      fail("pickle writer: tensor of shape [{}] and dtype {} holds {} bytes, expected {}", fmt::join(t.shape, ", "),
           dtype_name(t.dtype), t.data.size(), static_cast<size_t>(numel) * es);
    std::vector<int64_t> strides(t.shape.size(), 1);
    for (size_t i = t.shape.size(); i-- > 1;) strides[i - 1] = strides[i] * std::max<int64_t>(t.shape[i], 1);
    const std::string key = std::to_string(storages_.size());
    storages_.push_back(std::span<const uint8_t>(t.data));
    const char* cls = storage_class(t.dtype);
    global("torch._utils", cls ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
    op('(');
    op('(');  // persistent id ('storage', type, key, 'cpu', numel)
    string("storage");
    if (cls) global("torch", cls);
    else global("torch.storage", "UntypedStorage");
    string(key);
    string("cpu");
    integer(cls ? numel : static_cast<int64_t>(t.data.size()));
    op('t');
    op('Q');  // BINPERSID
    integer(0);  // storage offset
    ints_tuple(t.shape);
    ints_tuple(strides);
    op(t.requires_grad ? 0x88 : 0x89);
    global("collections", "OrderedDict");  // backward hooks: OrderedDict()
    op(')');
    op('R');
    if (!cls) global("torch", dtype_name(t.dtype));
    op('t');
    op('R');
  }
  void value(const Value& v, int depth) {
    if (depth > 512) fail("pickle writer: values nested deeper than 512");
    switch (v.kind()) {
      case Value::Kind::none: op('N'); return;
      case Value::Kind::boolean: op(v.as_bool() ? 0x88 : 0x89); return;
      case Value::Kind::integer: integer(v.as_int()); return;
      case Value::Kind::real: {
        op('G');
        const uint64_t u = std::bit_cast<uint64_t>(v.as_double());
        for (int i = 7; i >= 0; --i) op(uint8_t(u >> (8 * i)));
        return;
      }
      case Value::Kind::string: string(v.as_string()); return;
      case Value::Kind::list: {
        op(']');
        const auto& items = v.items();
        if (items.size() == 1) {
          value(items[0], depth + 1);
          op('a');
        } else if (!items.empty()) {
          for (size_t start = 0; start < items.size(); start += 1000) {
            op('(');
            for (size_t i = start; i < std::min(items.size(), start + 1000); ++i) value(items[i], depth + 1);
            op('e');
          }
        }
        return;
      }
      case Value::Kind::tuple: {
        const auto& items = v.items();
        if (items.empty()) { op(')'); return; }
        if (items.size() > 3) op('(');
        for (const Value& x : items) value(x, depth + 1);
        op(items.size() == 1 ? 0x85 : items.size() == 2 ? 0x86 : items.size() == 3 ? 0x87 : 't');
        return;
      }
      case Value::Kind::dict:
        if (v.ordered()) {
          global("collections", "OrderedDict");
          op(')');
          op('R');
        } else {
          op('}');
        }
        dict_items(v, depth);
        return;
      case Value::Kind::tensor: tensor(v.as_tensor()); return;
    }
  }

  std::vector<uint8_t> out_;
  std::vector<std::span<const uint8_t>>& storages_;
};

}  // namespace

std::vector<uint8_t> pickle(const Value& v, std::vector<std::span<const uint8_t>>& storages) {
  return Pickler(storages).run(v);
}

}  // namespace oscar::pt
