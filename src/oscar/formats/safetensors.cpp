#include "oscar/formats/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "oscar/core/dtype.h"
#include "oscar/core/error.h"

namespace oscar::safetensors {

// The format is little-endian; the loader copies bytes as they are.
static_assert(std::endian::native == std::endian::little, "safetensors reader assumes a little-endian host");

using json = nlohmann::json;

namespace {

struct DtypeEntry { const char* name; Dtype dtype; size_t size; };
constexpr DtypeEntry dtype_table[] = {
    {"F64", Dtype::f64, 8},  {"F32", Dtype::f32, 4},   {"F16", Dtype::f16, 2},
    {"BF16", Dtype::bf16, 2}, {"I64", Dtype::i64, 8},  {"I32", Dtype::i32, 4},
    {"I16", Dtype::i16, 2},  {"I8", Dtype::i8, 1},     {"U64", Dtype::u64, 8},
    {"U32", Dtype::u32, 4},  {"U16", Dtype::u16, 2},   {"U8", Dtype::u8, 1},
    {"BOOL", Dtype::boolean, 1}, {"F8_E4M3", Dtype::f8_e4m3, 1}, {"F8_E5M2", Dtype::f8_e5m2, 1},
};

const DtypeEntry& dtype_entry(Dtype d) {
  for (const auto& e : dtype_table)
    if (e.dtype == d) return e;
  fail("safetensors: invalid dtype value {}", int(d));
}

Dtype parse_dtype(const std::string& s, std::string_view file, std::string_view tensor) {
  for (const auto& e : dtype_table)
    if (s == e.name) return e.dtype;
  fail("{}: tensor '{}' has unknown dtype '{}'", file, tensor, s);
}

// Reads a JSON number that must be a non-negative integer.
uint64_t get_unsigned(const json& v, std::string_view file, std::string_view tensor, std::string_view field) {
  if (!v.is_number_unsigned()) {
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
    fail("{}: tensor '{}': {} must hold non-negative integers", file, tensor, field);
  }
  return v.get<uint64_t>();
}

// nlohmann::json keeps the last of duplicate keys silently; a parse callback sees every
// key, so a stack of per-object key sets catches them.
json parse_header_json(const char* begin, const char* end, std::string_view file) {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (ev == json::parse_event_t::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == json::parse_event_t::key && !keys.empty() && parsed.is_string()) {
      if (!keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
        duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json j = json::parse(begin, end, cb, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("{}: header is not valid JSON", file);
  if (!duplicate.empty()) fail("{}: header names '{}' twice", file, duplicate);
  if (!j.is_object()) fail("{}: header must be a JSON object", file);
  return j;
}

std::map<std::string, std::string> parse_metadata(const json& m, std::string_view file) {
  if (!m.is_object()) fail("{}: __metadata__ must be an object", file);
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string()) fail("{}: __metadata__ value '{}' must be a string", file, k);
    out[k] = v.get<std::string>();
  }
  return out;
}

TensorInfo parse_tensor(const std::string& name, const json& e, uint64_t data_size, std::string_view file) {
  if (!e.is_object()) fail("{}: tensor '{}' entry must be an object", file, name);
  TensorInfo t;
  t.name = name;
  const auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) fail("{}: tensor '{}' lacks a string dtype", file, name);
  t.dtype = parse_dtype(dt->get<std::string>(), file, name);

  const auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) fail("{}: tensor '{}' lacks a shape array", file, name);
  uint64_t n = 1;
  for (const auto& d : *sh) {
    const uint64_t v = get_unsigned(d, file, name, "shape");
    if (v > uint64_t(std::numeric_limits<int64_t>::max())) fail("{}: tensor '{}': shape dimension {} is too large", file, name, v);
    if (v != 0 && n > std::numeric_limits<uint64_t>::max() / v) fail("{}: tensor '{}': element count overflows", file, name);
    n *= v;
    t.shape.push_back(int64_t(v));
  }
  const size_t esize = dtype_size(t.dtype);
  if (n > std::numeric_limits<uint64_t>::max() / esize) fail("{}: tensor '{}': byte size overflows", file, name);
  t.n_elements = n;
  t.n_bytes = n * esize;

  const auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2)
    fail("{}: tensor '{}' lacks data_offsets [begin, end]", file, name);
  const uint64_t begin = get_unsigned((*off)[0], file, name, "data_offsets");
  const uint64_t end = get_unsigned((*off)[1], file, name, "data_offsets");
  if (begin > end) fail("{}: tensor '{}': data_offsets [{}, {}] are reversed", file, name, begin, end);
  if (end > data_size)
    fail("{}: tensor '{}': data_offsets end {} is past the data section ({} bytes); file truncated?", file, name, end, data_size);
  if (end - begin != t.n_bytes)
    fail("{}: tensor '{}': data_offsets span {} bytes but {} {} needs {}", file, name, end - begin,
         dtype_name(t.dtype), sh->dump(), t.n_bytes);
  t.begin = begin;
  return t;
}

// Tensors may not share bytes (the reference writer packs them back to back).
void check_no_overlap(const std::vector<TensorInfo>& ts, std::string_view file) {
  std::vector<const TensorInfo*> order;
  for (const auto& t : ts)
    if (t.n_bytes > 0) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i]->begin < order[i - 1]->begin + order[i - 1]->n_bytes)
      fail("{}: tensors '{}' and '{}' overlap", file, order[i - 1]->name, order[i]->name);
  }
}

}  // namespace

const char* dtype_name(Dtype d) { return dtype_entry(d).name; }
size_t dtype_size(Dtype d) { return dtype_entry(d).size; }

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto map = std::make_shared<MappedFile>(path);
  SafetensorsFile f = parse(map->data(), map->size(), path);
  f.map_ = std::move(map);
  return f;
}

SafetensorsFile SafetensorsFile::parse(const uint8_t* bytes, size_t size, std::string name_for_errors) {
  SafetensorsFile f;
  f.path_ = std::move(name_for_errors);
  const std::string& file = f.path_;
  if (size < 8) fail("{}: file is {} bytes, too short for a safetensors header", file, size);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > max_header_bytes) fail("{}: header length {} exceeds the {} byte limit", file, header_len, max_header_bytes);
  if (header_len > size - 8) fail("{}: header length {} is past the end of the file ({} bytes)", file, header_len, size);
  const char* hdr = reinterpret_cast<const char*>(bytes + 8);
  const json j = parse_header_json(hdr, hdr + header_len, file);

  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      f.metadata_ = parse_metadata(entry, file);
      continue;
    }
    TensorInfo t = parse_tensor(name, entry, data_size, file);
    t.data = data + t.begin;
    f.index_.emplace(name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }
  check_no_overlap(f.tensors_, file);
  return f;
}

const TensorInfo* SafetensorsFile::find_tensor(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) fail("{}: no tensor named '{}'", path_, name);
  return *t;
}

std::vector<float> SafetensorsFile::load_f32(const TensorInfo& t) const { return tensor_to_f32(t, path_); }

std::vector<float> tensor_to_f32(const TensorInfo& t, std::string_view file) {
  std::vector<float> out(t.n_elements);
  // memcpy per element: data offsets in the file need not be aligned.
  switch (t.dtype) {
    case Dtype::f32:
      if (t.n_bytes) std::memcpy(out.data(), t.data, t.n_bytes);
      break;
    case Dtype::f16:
      for (uint64_t i = 0; i < t.n_elements; ++i) {
        fp16 h;
        std::memcpy(&h.bits, t.data + 2 * i, 2);
        out[i] = fp16_to_f32(h);
      }
      break;
    case Dtype::bf16:
      for (uint64_t i = 0; i < t.n_elements; ++i) {
        bf16 b;
        std::memcpy(&b.bits, t.data + 2 * i, 2);
        out[i] = bf16_to_f32(b);
      }
      break;
    default:
      fail("{}: tensor '{}' has dtype {}; only F32, F16 and BF16 can be loaded", file, t.name, dtype_name(t.dtype));
  }
  return out;
}

// ---- sharded models ----

namespace {

namespace fs = std::filesystem;

// Shard names come from a file: they must be plain names inside the model directory.
void check_shard_name(const std::string& s, const std::string& index_path) {
  if (s.empty() || s.find('/') != std::string::npos || s.find('\\') != std::string::npos || s == "." || s == "..")
    fail("{}: weight_map names '{}', which is not a file name in the model directory", index_path, s);
}

// model.safetensors.index.json: {"weight_map": {tensor name: shard file name}}.
struct ShardIndex {
  std::vector<std::string> files;                         // unique, in first-use order
  std::vector<std::pair<std::string, std::string>> map;  // tensor -> file
};

ShardIndex read_shard_index(const fs::path& index_path) {
  const std::string ip = index_path.string();
  MappedFile m(ip);
  const char* p = reinterpret_cast<const char*>(m.data());
  const json j = json::parse(p, p + m.size(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail("{}: not a valid JSON object", ip);
  const auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) fail("{}: lacks a weight_map object", ip);
  ShardIndex idx;
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string()) fail("{}: weight_map entry '{}' must be a file name", ip, name);
    const std::string s = file.get<std::string>();
    check_shard_name(s, ip);
    if (std::find(idx.files.begin(), idx.files.end(), s) == idx.files.end()) idx.files.push_back(s);
    idx.map.emplace_back(name, s);
  }
  if (idx.files.empty()) fail("{}: weight_map is empty", ip);
  return idx;
}

std::vector<std::string> shards_in_dir(const fs::path& dir) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") paths.push_back(e.path().string());
  if (ec) fail("cannot list '{}': {}", dir.string(), ec.message());
  if (paths.empty()) fail("'{}' holds no .safetensors files", dir.string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace

SafetensorsModel SafetensorsModel::open(const std::string& path) {
  SafetensorsModel m;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    m.add_shard(SafetensorsFile::open(path));
    return m;
  }
  const fs::path index_path = fs::path(path) / "model.safetensors.index.json";
  if (!fs::exists(index_path, ec)) {
    for (const auto& f : shards_in_dir(path)) m.add_shard(SafetensorsFile::open(f));
    return m;
  }
  const ShardIndex idx = read_shard_index(index_path);
  for (const auto& f : idx.files) m.add_shard(SafetensorsFile::open((fs::path(path) / f).string()));
  // Every tensor the index promises must be in the shard it names.
  for (const auto& [name, file] : idx.map) {
    const auto it = m.index_.find(name);
    if (it == m.index_.end() || fs::path(m.shards_[it->second.shard].path()).filename() != file)
      fail("{}: tensor '{}' is listed in '{}' but that shard does not hold it", index_path.string(), name, file);
  }
  return m;
}

void SafetensorsModel::add_shard(SafetensorsFile f) {
  const size_t s = shards_.size();
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const std::string& name = f.tensors()[i].name;
    const auto it = index_.find(name);
    if (it != index_.end())
      fail("tensor '{}' appears in both '{}' and '{}'", name, shards_[it->second.shard].path(), f.path());
    index_.emplace(name, Location{s, i});
  }
  shards_.push_back(std::move(f));
}

std::vector<std::string> SafetensorsModel::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [n, loc] : index_) names.push_back(n);
  return names;
}

const TensorInfo* SafetensorsModel::find_tensor(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &shards_[it->second.shard].tensors()[it->second.tensor];
}

const TensorInfo& SafetensorsModel::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) fail("safetensors model: no tensor named '{}'", name);
  return *t;
}

std::shared_ptr<const void> SafetensorsModel::mapping(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) fail("safetensors model: no tensor named '{}'", name);
  return shards_[it->second.shard].mapping();
}

std::vector<float> SafetensorsModel::load_f32(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) fail("safetensors model: no tensor named '{}'", name);
  const SafetensorsFile& f = shards_[it->second.shard];
  return f.load_f32(f.tensors()[it->second.tensor]);
}

}  // namespace oscar::safetensors
