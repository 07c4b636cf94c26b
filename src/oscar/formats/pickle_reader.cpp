// Whitelist unpickler for torch.save's data.pkl. It understands the opcodes pickle
// protocols 2–5 use for containers, numbers, strings and object rebuilds, and allows
// only these globals: tensor rebuilds (torch._utils._rebuild_tensor[_v2|_v3],
// _rebuild_parameter), collections.OrderedDict, torch's storage classes and dtypes.
// Nothing is ever called: a REDUCE of an allowed global is interpreted here. Every
// size read from the stream is checked against what remains, and the stack, the memo,
// nesting and the bytes gathered into tensors are bounded (Limits).
//
// Objects live in a graph of shared nodes while unpickling (the memo aliases them and
// SETITEMS/APPENDS mutate them after BINPUT, as in Python); the graph becomes a Value
// tree at STOP, refusing cycles and unbounded expansion.
#include <bit>
#include <cstring>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <fmt/ranges.h>

#include "oscar/core/error.h"
#include "oscar/formats/torch_pt.h"

namespace oscar::pt {

static_assert(std::endian::native == std::endian::little, "the .pt reader assumes a little-endian host");

namespace {

enum class Global {
  rebuild_tensor,     // torch._utils._rebuild_tensor(storage, offset, size, stride)
  rebuild_tensor_v2,  // (storage, offset, size, stride, requires_grad, hooks[, metadata])
  rebuild_tensor_v3,  // (..., hooks, dtype[, metadata])
  rebuild_parameter,  // torch._utils._rebuild_parameter(tensor, requires_grad, hooks)
  ordered_dict,       // collections.OrderedDict
  storage_type,       // torch.FloatStorage, ..., torch.storage.UntypedStorage (dtype u8)
  dtype,              // torch.float32, torch.uint16, ...
};

struct Node;
using NodePtr = std::shared_ptr<Node>;

struct Storage {
  Dtype dtype = Dtype::u8;   // element type of the storage (u8 for UntypedStorage)
  uint64_t numel = 0;        // elements of `dtype`
  std::shared_ptr<const std::vector<uint8_t>> bytes;
  std::string key;
};

struct Node {
  enum class Kind { none, boolean, integer, real, string, list, tuple, dict, tensor, global, storage } kind = Kind::none;
  bool ordered = false;
  bool b = false;
  int64_t i = 0;
  double d = 0.0;
  std::string s;
  std::vector<NodePtr> items;   // list/tuple elements, dict keys
  std::vector<NodePtr> values;  // dict values
  std::shared_ptr<const Tensor> tensor;
  Global global = Global::ordered_dict;
  Dtype dtype = Dtype::f32;     // storage_type / dtype globals
  Storage storage;
};

const char* node_kind_name(Node::Kind k) {
  switch (k) {
    case Node::Kind::none: return "None";
    case Node::Kind::boolean: return "bool";
    case Node::Kind::integer: return "int";
    case Node::Kind::real: return "float";
    case Node::Kind::string: return "str";
    case Node::Kind::list: return "list";
    case Node::Kind::tuple: return "tuple";
    case Node::Kind::dict: return "dict";
    case Node::Kind::tensor: return "tensor";
    case Node::Kind::global: return "global";
    case Node::Kind::storage: return "storage";
  }
  return "?";
}

struct StorageName { const char* name; Dtype dtype; };
constexpr StorageName storage_names[] = {
    {"FloatStorage", Dtype::f32},          {"DoubleStorage", Dtype::f64},
    {"HalfStorage", Dtype::f16},           {"BFloat16Storage", Dtype::bf16},
    {"LongStorage", Dtype::i64},           {"IntStorage", Dtype::i32},
    {"ShortStorage", Dtype::i16},          {"CharStorage", Dtype::i8},
    {"ByteStorage", Dtype::u8},            {"BoolStorage", Dtype::boolean},
    {"ComplexFloatStorage", Dtype::c64},   {"ComplexDoubleStorage", Dtype::c128},
};

struct DtypeName { const char* name; Dtype dtype; };
constexpr DtypeName dtype_names[] = {
    {"float32", Dtype::f32},   {"float", Dtype::f32},      {"float64", Dtype::f64},  {"double", Dtype::f64},
    {"float16", Dtype::f16},   {"half", Dtype::f16},       {"bfloat16", Dtype::bf16},
    {"int64", Dtype::i64},     {"long", Dtype::i64},       {"int32", Dtype::i32},    {"int", Dtype::i32},
    {"int16", Dtype::i16},     {"short", Dtype::i16},      {"int8", Dtype::i8},      {"uint8", Dtype::u8},
    {"bool", Dtype::boolean},  {"complex64", Dtype::c64},  {"cfloat", Dtype::c64},
    {"complex128", Dtype::c128}, {"cdouble", Dtype::c128},
    {"uint16", Dtype::u16},    {"uint32", Dtype::u32},     {"uint64", Dtype::u64},
    {"float8_e4m3fn", Dtype::f8_e4m3fn}, {"float8_e5m2", Dtype::f8_e5m2},
};

NodePtr make(Node::Kind k) {
  auto n = std::make_shared<Node>();
  n->kind = k;
  return n;
}

// Resolves module.name against the whitelist; anything else is refused by name.
NodePtr resolve_global(const std::string& module, const std::string& name) {
  auto g = make(Node::Kind::global);
  if (module == "torch._utils") {
    if (name == "_rebuild_tensor") { g->global = Global::rebuild_tensor; return g; }
    if (name == "_rebuild_tensor_v2") { g->global = Global::rebuild_tensor_v2; return g; }
    if (name == "_rebuild_tensor_v3") { g->global = Global::rebuild_tensor_v3; return g; }
    if (name == "_rebuild_parameter") { g->global = Global::rebuild_parameter; return g; }
  } else if (module == "collections" && name == "OrderedDict") {
    g->global = Global::ordered_dict;
    return g;
  } else if ((module == "torch.storage" || module == "torch") && name == "UntypedStorage") {
    g->global = Global::storage_type;
    g->dtype = Dtype::u8;
    return g;
  } else if (module == "torch") {
    for (const auto& s : storage_names)
      if (name == s.name) { g->global = Global::storage_type; g->dtype = s.dtype; return g; }
    for (const auto& d : dtype_names)
      if (name == d.name) { g->global = Global::dtype; g->dtype = d.dtype; return g; }
  }
  fail("refusing to load: pickle references '{}.{}' (only tensors, containers and OrderedDict are allowed)", module,
       name);
}

class Unpickler {
 public:
  Unpickler(std::span<const uint8_t> p, StorageSource& src, const Limits& lim) : p_(p), src_(src), lim_(lim) {}
  // A hostile pickle can make containers that hold themselves (shared_ptr cycles):
  // empty every container so that all nodes are freed.
  ~Unpickler() {
    for (const NodePtr& n : containers_) {
      n->items.clear();
      n->values.clear();
    }
  }
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;

  Value run();

 private:
  // ---- stream reading (each read checked against the bytes that remain) ----
  size_t remaining() const { return p_.size() - pos_; }
  const uint8_t* take(uint64_t n, const char* what) {
    if (n > remaining()) fail("pickle truncated: {} needs {} bytes at offset {}, {} remain", what, n, pos_, remaining());
    const uint8_t* q = p_.data() + pos_;
    pos_ += static_cast<size_t>(n);
    return q;
  }
  uint64_t read_le(int n, const char* what) {
    const uint8_t* q = take(static_cast<uint64_t>(n), what);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | q[i];
    return v;
  }
  std::string read_line(const char* what) {
    const size_t start = pos_;
    while (pos_ < p_.size() && p_[pos_] != '\n') {
      if (pos_ - start > 1024) fail("pickle: {} line longer than 1024 bytes at offset {}", what, start);
      ++pos_;
    }
    if (pos_ >= p_.size()) fail("pickle truncated: unterminated {} at offset {}", what, start);
    std::string s(reinterpret_cast<const char*>(p_.data() + start), pos_ - start);
    ++pos_;
    return s;
  }
  std::string read_string(uint64_t n, const char* what) {
    const uint8_t* q = take(n, what);
    return std::string(reinterpret_cast<const char*>(q), static_cast<size_t>(n));
  }

  // ---- stack ----
  void push(NodePtr n) {
    if (stack_.size() + marks_.size() >= lim_.max_stack) fail("pickle: stack deeper than {} entries", lim_.max_stack);
    stack_.push_back(std::move(n));
  }
  NodePtr pop(const char* op) {
    if (stack_.size() <= floor()) fail("pickle: {} at offset {} on an empty stack", op, op_pos_);
    NodePtr n = std::move(stack_.back());
    stack_.pop_back();
    return n;
  }
  NodePtr& top(const char* op) {
    if (stack_.size() <= floor()) fail("pickle: {} at offset {} on an empty stack", op, op_pos_);
    return stack_.back();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<NodePtr> pop_mark(const char* op) {
    if (marks_.empty()) fail("pickle: {} at offset {} without a MARK", op, op_pos_);
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<NodePtr> items(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(m)),
                               std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return items;
  }

  void memo_put(uint64_t index) {
    const NodePtr& n = top("PUT");
    if (memo_.size() >= lim_.max_memo && !memo_.count(index))
      fail("pickle: memo larger than {} entries", lim_.max_memo);
    memo_[index] = n;
  }
  void memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("pickle: GET of memo entry {} that was never PUT (offset {})", index, op_pos_);
    push(it->second);
  }

  static void check_kind(const NodePtr& n, Node::Kind k, const char* what) {
    if (n->kind != k) fail("pickle: {} must be a {}, got {}", what, node_kind_name(k), node_kind_name(n->kind));
  }
  static void check_key(const NodePtr& k) {
    if (k->kind != Node::Kind::integer && k->kind != Node::Kind::string)
      fail("pickle: dict key of type {} (only int and str keys are supported)", node_kind_name(k->kind));
  }
  static void dict_set(Node& d, NodePtr k, NodePtr v) {
    check_key(k);
    for (size_t i = 0; i < d.items.size(); ++i) {
      const Node& e = *d.items[i];
      if (e.kind == k->kind && (k->kind == Node::Kind::integer ? e.i == k->i : e.s == k->s)) {
        d.values[i] = std::move(v);
        return;
      }
    }
    d.items.push_back(std::move(k));
    d.values.push_back(std::move(v));
  }
  void setitems(NodePtr& target, std::vector<NodePtr>& kv, const char* op) {
    check_kind(target, Node::Kind::dict, std::string(op).append(" target").c_str());
    if (kv.size() % 2) fail("pickle: {} with an odd number of stack items", op);
    for (size_t i = 0; i < kv.size(); i += 2) dict_set(*target, std::move(kv[i]), std::move(kv[i + 1]));
  }

  NodePtr persistent_load(const NodePtr& pid);
  NodePtr reduce(const NodePtr& callable, const NodePtr& args);
  NodePtr rebuild_tensor(const std::vector<NodePtr>& a, Dtype dtype_override, bool has_dtype, bool requires_grad,
                         const char* fn);

  Value to_value(const NodePtr& n, int depth);
  NodePtr container(Node::Kind k) {
    containers_.push_back(make(k));
    return containers_.back();
  }

  std::span<const uint8_t> p_;
  StorageSource& src_;
  const Limits& lim_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  std::vector<NodePtr> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, NodePtr> memo_;
  std::map<std::string, std::shared_ptr<const std::vector<uint8_t>>> storages_;
  uint64_t storage_bytes_ = 0;
  uint64_t tensor_bytes_ = 0;
  uint64_t values_made_ = 0;
  std::unordered_set<const Node*> in_progress_;
  std::vector<NodePtr> containers_;
};

NodePtr Unpickler::persistent_load(const NodePtr& pid) {
  if (pid->kind != Node::Kind::tuple || pid->items.size() != 5 || pid->items[0]->kind != Node::Kind::string ||
      pid->items[0]->s != "storage")
    fail("pickle: persistent id is not ('storage', type, key, location, numel)");
  const NodePtr& type = pid->items[1];
  if (type->kind != Node::Kind::global || type->global != Global::storage_type)
    fail("pickle: persistent id names no storage type (got {})", node_kind_name(type->kind));
  check_kind(pid->items[2], Node::Kind::string, "storage key");
  check_kind(pid->items[3], Node::Kind::string, "storage location");
  check_kind(pid->items[4], Node::Kind::integer, "storage numel");
  const std::string& key = pid->items[2]->s;
  const int64_t numel = pid->items[4]->i;
  if (numel < 0) fail("pickle: storage '{}' has negative numel {}", key, numel);
  auto it = storages_.find(key);
  if (it == storages_.end()) {
    auto bytes = src_.storage_bytes(key);
    if (!bytes) fail("storage '{}' is missing", key);
    storage_bytes_ += bytes->size();
    it = storages_.emplace(key, std::move(bytes)).first;
  }
  const uint64_t es = dtype_size(type->dtype);
  uint64_t need = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), es, &need) || need > it->second->size())
    fail("storage '{}' claims {} elements of {} ({} bytes) but its record holds {} bytes", key, numel,
         dtype_name(type->dtype), numel * es, it->second->size());
  auto n = make(Node::Kind::storage);
  n->storage = Storage{type->dtype, static_cast<uint64_t>(numel), it->second, key};
  return n;
}

NodePtr Unpickler::rebuild_tensor(const std::vector<NodePtr>& a, Dtype dtype, bool has_dtype, bool requires_grad,
                                  const char* fn) {
  check_kind(a[0], Node::Kind::storage, fmt::format("{} storage", fn).c_str());
  check_kind(a[1], Node::Kind::integer, fmt::format("{} storage_offset", fn).c_str());
  const Storage& st = a[0]->storage;
  if (!has_dtype) dtype = st.dtype;
  auto ints = [&](const NodePtr& t, const char* what) {
    if (t->kind != Node::Kind::tuple && t->kind != Node::Kind::list)
      fail("{}: {} must be a tuple, got {}", fn, what, node_kind_name(t->kind));
    if (t->items.size() > lim_.max_dims) fail("{}: {} has {} dims (limit {})", fn, what, t->items.size(), lim_.max_dims);
    std::vector<int64_t> v;
    for (const NodePtr& x : t->items) {
      check_kind(x, Node::Kind::integer, what);
      if (x->i < 0) fail("{}: negative entry {} in {}", fn, x->i, what);
      v.push_back(x->i);
    }
    return v;
  };
  Tensor t;
  t.dtype = dtype;
  t.requires_grad = requires_grad;
  t.storage_offset = a[1]->i;
  t.shape = ints(a[2], "size");
  t.strides = ints(a[3], "stride");
  if (t.storage_offset < 0) fail("{}: negative storage offset {}", fn, t.storage_offset);
  if (t.shape.size() != t.strides.size())
    fail("{}: size has {} dims but stride has {}", fn, t.shape.size(), t.strides.size());
  const uint64_t es = dtype_size(dtype);
  const uint64_t storage_elems = st.numel * dtype_size(st.dtype) / es;  // UntypedStorage: bytes / element size
  uint64_t numel = 1, last = static_cast<uint64_t>(t.storage_offset);
  bool empty = false;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(t.shape[i]), &numel))
      fail("{}: element count overflows", fn);
    if (t.shape[i] == 0) empty = true;
  }
  if (!empty) {
    for (size_t i = 0; i < t.shape.size(); ++i) {
      uint64_t span = 0;
      if (__builtin_mul_overflow(static_cast<uint64_t>(t.shape[i] - 1), static_cast<uint64_t>(t.strides[i]), &span) ||
          __builtin_add_overflow(last, span, &last))
        fail("{}: view extent overflows", fn);
    }
    if (last >= storage_elems)
      fail("{}: view (offset {}, size {}, stride {}) reaches element {} of storage '{}' holding {} elements of {}", fn,
           t.storage_offset, fmt::join(t.shape, "x"), fmt::join(t.strides, ","), last, st.key, storage_elems,
           dtype_name(dtype));
  } else {
    numel = 0;
  }
  uint64_t nbytes = numel * es;  // numel ≤ storage_elems (a view inside the storage) unless strides are 0
  if (__builtin_mul_overflow(numel, es, &nbytes)) fail("{}: byte count overflows", fn);
  tensor_bytes_ += nbytes;
  if (tensor_bytes_ > 4 * storage_bytes_ + lim_.tensor_bytes_slack)
    fail("{}: tensors would gather {} bytes from {} bytes of storage (limit 4x + {})", fn, tensor_bytes_,
         storage_bytes_, lim_.tensor_bytes_slack);
  t.data.resize(static_cast<size_t>(nbytes));
  if (numel > 0) {
    // Gather the strided view row-major, innermost dimension fastest.
    const uint8_t* base = st.bytes->data();
    const size_t nd = t.shape.size();
    std::vector<int64_t> idx(nd, 0);
    uint8_t* out = t.data.data();
    for (uint64_t e = 0; e < numel; ++e) {
      uint64_t off = static_cast<uint64_t>(t.storage_offset);
      for (size_t d = 0; d < nd; ++d) off += static_cast<uint64_t>(idx[d]) * static_cast<uint64_t>(t.strides[d]);
      std::memcpy(out + e * es, base + off * es, es);
      for (size_t d = nd; d-- > 0;) {
        if (++idx[d] < t.shape[d]) break;
        idx[d] = 0;
      }
    }
  }
  auto n = make(Node::Kind::tensor);
  n->tensor = std::make_shared<const Tensor>(std::move(t));
  return n;
}

NodePtr Unpickler::reduce(const NodePtr& callable, const NodePtr& args) {
  if (callable->kind != Node::Kind::global)
    fail("pickle: REDUCE of a {} (only whitelisted globals can be called)", node_kind_name(callable->kind));
  check_kind(args, Node::Kind::tuple, "REDUCE arguments");
  const std::vector<NodePtr>& a = args->items;
  switch (callable->global) {
    case Global::ordered_dict: {
      auto d = container(Node::Kind::dict);
      d->ordered = true;
      if (a.empty()) return d;
      // OrderedDict([(k, v), ...])
      if (a.size() != 1 || (a[0]->kind != Node::Kind::list && a[0]->kind != Node::Kind::tuple))
        fail("pickle: OrderedDict called with unsupported arguments");
      for (const NodePtr& pair : a[0]->items) {
        if (pair->kind != Node::Kind::tuple || pair->items.size() != 2) fail("pickle: OrderedDict item is not a pair");
        dict_set(*d, pair->items[0], pair->items[1]);
      }
      return d;
    }
    case Global::rebuild_tensor:
      if (a.size() != 4) fail("_rebuild_tensor takes 4 arguments, got {}", a.size());
      return rebuild_tensor(a, Dtype::f32, false, false, "_rebuild_tensor");
    case Global::rebuild_tensor_v2: {
      if (a.size() != 6 && a.size() != 7) fail("_rebuild_tensor_v2 takes 6 or 7 arguments, got {}", a.size());
      check_kind(a[4], Node::Kind::boolean, "_rebuild_tensor_v2 requires_grad");
      return rebuild_tensor(a, Dtype::f32, false, a[4]->b, "_rebuild_tensor_v2");
    }
    case Global::rebuild_tensor_v3: {
      if (a.size() != 7 && a.size() != 8) fail("_rebuild_tensor_v3 takes 7 or 8 arguments, got {}", a.size());
      check_kind(a[4], Node::Kind::boolean, "_rebuild_tensor_v3 requires_grad");
      if (a[6]->kind != Node::Kind::global || a[6]->global != Global::dtype)
        fail("_rebuild_tensor_v3: argument 7 must be a torch dtype");
      return rebuild_tensor(a, a[6]->dtype, true, a[4]->b, "_rebuild_tensor_v3");
    }
    case Global::rebuild_parameter: {
      if (a.size() != 3) fail("_rebuild_parameter takes 3 arguments, got {}", a.size());
      check_kind(a[0], Node::Kind::tensor, "_rebuild_parameter data");
      check_kind(a[1], Node::Kind::boolean, "_rebuild_parameter requires_grad");
      auto t = std::make_shared<Tensor>(*a[0]->tensor);
      t->requires_grad = a[1]->b;
      auto n = make(Node::Kind::tensor);
      n->tensor = std::move(t);
      return n;
    }
    case Global::storage_type:
    case Global::dtype:
      break;
  }
  fail("pickle: REDUCE of a storage type or dtype is not allowed");
}

Value Unpickler::to_value(const NodePtr& n, int depth) {
  if (depth > lim_.max_depth) fail("pickle: containers nested deeper than {}", lim_.max_depth);
  if (++values_made_ > lim_.max_values) fail("pickle: more than {} values (shared references expand)", lim_.max_values);
  switch (n->kind) {
    case Node::Kind::none: return Value();
    case Node::Kind::boolean: return Value::boolean(n->b);
    case Node::Kind::integer: return Value::integer(n->i);
    case Node::Kind::real: return Value::real(n->d);
    case Node::Kind::string: return Value::string(n->s);
    case Node::Kind::tensor: return Value::shared_tensor(n->tensor);
    case Node::Kind::list:
    case Node::Kind::tuple:
    case Node::Kind::dict: {
      if (!in_progress_.insert(n.get()).second) fail("pickle: the object graph has a cycle");
      Value v = n->kind == Node::Kind::list    ? Value::list()
                : n->kind == Node::Kind::tuple ? Value::tuple()
                : n->ordered                   ? Value::ordered_dict()
                                               : Value::dict();
      if (n->kind == Node::Kind::dict) {
        for (size_t i = 0; i < n->items.size(); ++i) v.set(to_value(n->items[i], depth + 1), to_value(n->values[i], depth + 1));
      } else {
        for (const NodePtr& x : n->items) v.push_back(to_value(x, depth + 1));
      }
      in_progress_.erase(n.get());
      return v;
    }
    case Node::Kind::global:
    case Node::Kind::storage:
      break;
  }
  fail("pickle: the result contains a bare {} (only tensors, containers and scalars are allowed)",
       node_kind_name(n->kind));
}

Value Unpickler::run() {
  if (p_.size() > lim_.max_pickle_bytes) fail("pickle of {} bytes exceeds the limit of {}", p_.size(), lim_.max_pickle_bytes);
  while (true) {
    op_pos_ = pos_;
    const uint8_t op = *take(1, "opcode");
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t v = *take(1, "PROTO");
        if (v < 2 || v > 5) fail("pickle protocol {} is not supported (2 to 5 are)", v);
        break;
      }
      case 0x95: {  // FRAME: a length hint; the data follows inline
        const uint64_t n = read_le(8, "FRAME");
        if (n > remaining()) fail("pickle truncated: FRAME of {} bytes at offset {}, {} remain", n, op_pos_, remaining());
        break;
      }
      case '.': {  // STOP
        if (stack_.size() != 1 || !marks_.empty())
          fail("pickle: STOP with {} stack items and {} marks (expected one item)", stack_.size(), marks_.size());
        return to_value(stack_.back(), 0);
      }
      case '(':  // MARK
        if (stack_.size() + marks_.size() >= lim_.max_stack) fail("pickle: more than {} marks", lim_.max_stack);
        marks_.push_back(stack_.size());
        break;
      case '0': pop("POP"); break;
      case '1': pop_mark("POP_MARK"); break;
      case '2': push(top("DUP")); break;
      case '}': push(container(Node::Kind::dict)); break;
      case ']': push(container(Node::Kind::list)); break;
      case ')': push(container(Node::Kind::tuple)); break;
      case 'N': push(make(Node::Kind::none)); break;
      case 0x88:
      case 0x89: {
        auto n = make(Node::Kind::boolean);
        n->b = op == 0x88;
        push(n);
        break;
      }
      case 'K':
      case 'M':
      case 'J': {
        auto n = make(Node::Kind::integer);
        if (op == 'K') n->i = static_cast<int64_t>(read_le(1, "BININT1"));
        else if (op == 'M') n->i = static_cast<int64_t>(read_le(2, "BININT2"));
        else n->i = static_cast<int32_t>(static_cast<uint32_t>(read_le(4, "BININT")));
        push(n);
        break;
      }
      case 0x8a:    // LONG1
      case 0x8b: {  // LONG4
        const uint64_t len = op == 0x8a ? read_le(1, "LONG1") : read_le(4, "LONG4");
        if (len > 8) fail("pickle: integer of {} bytes at offset {} does not fit in int64", len, op_pos_);
        const uint8_t* q = take(len, "LONG");
        uint64_t u = 0;
        for (uint64_t i = len; i-- > 0;) u = (u << 8) | q[i];
        if (len > 0 && len < 8 && (q[len - 1] & 0x80)) u |= ~uint64_t(0) << (8 * len);  // sign-extend
        auto n = make(Node::Kind::integer);
        n->i = static_cast<int64_t>(u);
        push(n);
        break;
      }
      case 'G': {  // BINFLOAT, big-endian
        const uint8_t* q = take(8, "BINFLOAT");
        uint64_t u = 0;
        for (int i = 0; i < 8; ++i) u = (u << 8) | q[i];
        auto n = make(Node::Kind::real);
        std::memcpy(&n->d, &u, 8);
        push(n);
        break;
      }
      case 0x8c:  // SHORT_BINUNICODE
      case 'X':   // BINUNICODE
      case 0x8d:  // BINUNICODE8
      case 'U':   // SHORT_BINSTRING
      case 'T': { // BINSTRING
        uint64_t len = 0;
        if (op == 0x8c || op == 'U') len = read_le(1, "string length");
        else if (op == 0x8d) len = read_le(8, "string length");
        else if (op == 'T') {
          const int32_t l = static_cast<int32_t>(static_cast<uint32_t>(read_le(4, "string length")));
          if (l < 0) fail("pickle: negative string length at offset {}", op_pos_);
          len = static_cast<uint64_t>(l);
        } else len = read_le(4, "string length");
        auto n = make(Node::Kind::string);
        n->s = read_string(len, "string");
        push(n);
        break;
      }
      case 't': {  // TUPLE
        auto n = container(Node::Kind::tuple);
        n->items = pop_mark("TUPLE");
        push(n);
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        const int k = op - 0x84;
        auto n = container(Node::Kind::tuple);
        n->items.resize(static_cast<size_t>(k));
        for (int i = k; i-- > 0;) n->items[static_cast<size_t>(i)] = pop("TUPLEn");
        push(n);
        break;
      }
      case 'l': {  // LIST
        auto n = container(Node::Kind::list);
        n->items = pop_mark("LIST");
        push(n);
        break;
      }
      case 'd': {  // DICT
        auto n = container(Node::Kind::dict);
        auto kv = pop_mark("DICT");
        setitems(n, kv, "DICT");
        push(n);
        break;
      }
      case 'q': memo_put(read_le(1, "BINPUT")); break;
      case 'r': memo_put(read_le(4, "LONG_BINPUT")); break;
      case 0x94: memo_put(memo_.size()); break;  // MEMOIZE
      case 'h': memo_get(read_le(1, "BINGET")); break;
      case 'j': memo_get(read_le(4, "LONG_BINGET")); break;
      case 's': {  // SETITEM
        NodePtr v = pop("SETITEM");
        NodePtr k = pop("SETITEM");
        NodePtr& d = top("SETITEM");
        check_kind(d, Node::Kind::dict, "SETITEM target");
        dict_set(*d, std::move(k), std::move(v));
        break;
      }
      case 'u': {  // SETITEMS
        auto kv = pop_mark("SETITEMS");
        setitems(top("SETITEMS"), kv, "SETITEMS");
        break;
      }
      case 'a': {  // APPEND
        NodePtr v = pop("APPEND");
        NodePtr& l = top("APPEND");
        check_kind(l, Node::Kind::list, "APPEND target");
        l->items.push_back(std::move(v));
        break;
      }
      case 'e': {  // APPENDS
        auto items = pop_mark("APPENDS");
        NodePtr& l = top("APPENDS");
        check_kind(l, Node::Kind::list, "APPENDS target");
        for (NodePtr& x : items) l->items.push_back(std::move(x));
        break;
      }
      case 'c': {  // GLOBAL "module\nname\n"
        std::string module = read_line("GLOBAL module");
        std::string name = read_line("GLOBAL name");
        push(resolve_global(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        NodePtr name = pop("STACK_GLOBAL");
        NodePtr module = pop("STACK_GLOBAL");
        check_kind(module, Node::Kind::string, "STACK_GLOBAL module");
        check_kind(name, Node::Kind::string, "STACK_GLOBAL name");
        push(resolve_global(module->s, name->s));
        break;
      }
      case 'R': {  // REDUCE
        NodePtr args = pop("REDUCE");
        NodePtr callable = pop("REDUCE");
        push(reduce(callable, args));
        break;
      }
      case 0x81: {  // NEWOBJ cls args: only OrderedDict()
        NodePtr args = pop("NEWOBJ");
        NodePtr cls = pop("NEWOBJ");
        if (cls->kind != Node::Kind::global || cls->global != Global::ordered_dict)
          fail("pickle: NEWOBJ of a {} (only OrderedDict may be constructed)", node_kind_name(cls->kind));
        push(reduce(cls, args));
        break;
      }
      case 'b': {  // BUILD: only state on an OrderedDict (a state_dict's _metadata); ignored
        NodePtr state = pop("BUILD");
        NodePtr& obj = top("BUILD");
        if (obj->kind != Node::Kind::dict || !obj->ordered)
          fail("pickle: BUILD on a {} (only OrderedDict state is accepted)", node_kind_name(obj->kind));
        (void)state;
        break;
      }
      case 'Q': {  // BINPERSID
        NodePtr pid = pop("BINPERSID");
        push(persistent_load(pid));
        break;
      }
      default:
        fail("pickle: unsupported opcode 0x{:02x} ('{}') at offset {}", op,
             (op >= 0x20 && op < 0x7f) ? std::string(1, char(op)) : std::string("?"), op_pos_);
    }
  }
}

}  // namespace

Value unpickle(std::span<const uint8_t> pickle, StorageSource& storages, const Limits& limits) {
  return Unpickler(pickle, storages, limits).run();
}

}  // namespace oscar::pt
