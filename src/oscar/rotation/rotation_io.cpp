// RotationZoo directories <-> RotationSet (see rotation_io.h).
#include "oscar/rotation/rotation_io.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <type_traits>

#include "oscar/core/error.h"
#include "oscar/formats/json_integer.h"
#include "oscar/formats/torch_pt.h"

namespace oscar {

namespace fs = std::filesystem;

namespace {

// A layer key: an int, or a string of decimal digits (RotationZoo files use both).
int layer_key(const pt::Value& k, const std::string& path) {
  int64_t i = -1;
  if (k.kind() == pt::Value::Kind::integer) {
    i = k.as_int();
  } else if (k.kind() == pt::Value::Kind::string) {
    const std::string& s = k.as_string();
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), i);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty()) fail("{}: layer key '{}' is not an integer", path, s);
  } else {
    fail("{}: layer key of type {} (int or str expected)", path, k.kind_name());
  }
  if (i < 0 || i > 100000) fail("{}: layer key {} is out of range", path, i);
  return static_cast<int>(i);
}

std::vector<float> tensor_f32(const pt::Value& v, const std::string& path, int layer, const char* what,
                              const std::vector<int64_t>& want_shape) {
  if (!v.is_tensor()) fail("{}: layer {}: '{}' is a {}, expected a tensor", path, layer, what, v.kind_name());
  const pt::Tensor& t = v.as_tensor();
  if (t.shape != want_shape)
    fail("{}: layer {}: '{}' has shape [{}], expected [{}]", path, layer, what, fmt::join(t.shape, ", "),
         fmt::join(want_shape, ", "));
  try {
    return t.to_f32();
  } catch (const Error& e) {
    fail("{}: layer {}: '{}': {}", path, layer, what, e.what());
  }
}

std::string objective_from_name(const fs::path& p, const char* prefix) {
  const std::string stem = p.stem().string();
  return stem.rfind(prefix, 0) == 0 ? stem.substr(std::string(prefix).size()) : "";
}

}  // namespace

RotationFile read_rotation_file(const std::string& path) {
  const pt::Value root = pt::load(path);
  if (!root.is_dict()) fail("{}: top level is a {}, expected a dict", path, root.kind_name());
  RotationFile f;
  if (const pt::Value* o = root.find("objective"); o && o->kind() == pt::Value::Kind::string) f.objective = o->as_string();
  f.source_grouping = "layer";
  if (const pt::Value* g = root.find("source_grouping"); g && g->kind() == pt::Value::Kind::string)
    f.source_grouping = g->as_string();
  if (const pt::Value* fv = root.find("format_version"); fv && fv->kind() == pt::Value::Kind::integer && fv->as_int() != 1)
    fail("{}: format_version {} is not supported (1 is)", path, fv->as_int());
  const pt::Value* layers = root.find("layers");
  if (!layers) fail("{}: no 'layers' entry", path);
  if (!layers->is_dict()) fail("{}: 'layers' is a {}, expected a dict", path, layers->kind_name());
  std::map<int, const pt::Value*> by_layer;
  for (size_t i = 0; i < layers->keys().size(); ++i) {
    const int l = layer_key(layers->keys()[i], path);
    if (!by_layer.emplace(l, &layers->values()[i]).second) fail("{}: layer {} appears twice", path, l);
  }
  if (by_layer.empty()) fail("{}: 'layers' is empty", path);
  int expect = 0;
  for (const auto& [l, v] : by_layer) {
    if (l != expect) fail("{}: layer {} is missing (layers must be 0..{})", path, expect, by_layer.rbegin()->first);
    ++expect;
    if (!v->is_dict()) fail("{}: layer {} is a {}, expected a dict", path, l, v->kind_name());
    if (const pt::Value* id = v->find("layer_id"); id && id->kind() == pt::Value::Kind::integer && id->as_int() != l)
      fail("{}: layer {} has layer_id {}", path, l, id->as_int());
    const pt::Value* r = v->find("rotation");
    if (!r) fail("{}: layer {} has no 'rotation'", path, l);
    if (!r->is_tensor()) fail("{}: layer {}: 'rotation' is a {}, expected a tensor", path, l, r->kind_name());
    const std::vector<int64_t>& shape = r->as_tensor().shape;
    if (f.head_dim == 0) {
      if (shape.size() != 2 || shape[0] != shape[1] || shape[0] <= 0 || shape[0] > 65536)
        fail("{}: layer {}: 'rotation' has shape [{}], expected a square [d, d]", path, l, fmt::join(shape, ", "));
      f.head_dim = static_cast<int>(shape[0]);
    }
    const int64_t d = f.head_dim;
    f.rotations.push_back(tensor_f32(*r, path, l, "rotation", {d, d}));
    const pt::Value* e = v->find("eigenvalues");
    f.eigenvalues.push_back(e && !e->is_none() ? tensor_f32(*e, path, l, "eigenvalues", {d}) : std::vector<float>{});
  }
  return f;
}

namespace {

pt::Value rotation_file_value(const RotationSet& rs, bool k) {
  const int d = rs.head_dim;
  pt::Value layers = pt::Value::dict();
  for (const LayerRotation& l : rs.layers) {
    std::vector<float> r = k ? l.k_rotation : l.v_rotation;
    if (r.empty()) {  // identity
      r.assign(static_cast<size_t>(d) * static_cast<size_t>(d), 0.0f);
      for (int i = 0; i < d; ++i) r[static_cast<size_t>(i) * static_cast<size_t>(d) + static_cast<size_t>(i)] = 1.0f;
    }
    std::vector<float> e = k ? l.k_eigenvalues : l.v_eigenvalues;
    if (e.empty()) e.assign(static_cast<size_t>(d), 1.0f);
    pt::Value entry = pt::Value::dict();
    entry.set(pt::Value::string("layer_id"), pt::Value::integer(l.layer));
    entry.set(pt::Value::string("rotation"), pt::Value::tensor(pt::Tensor::from_f32(r, {d, d})));
    entry.set(pt::Value::string("eigenvalues"), pt::Value::tensor(pt::Tensor::from_f32(e, {d})));
    layers.set(pt::Value::integer(l.layer), std::move(entry));
  }
  pt::Value root = pt::Value::dict();
  root.set(pt::Value::string("format_version"), pt::Value::integer(1));
  root.set(pt::Value::string("objective"), pt::Value::string(k ? rs.k_objective : rs.v_objective));
  root.set(pt::Value::string("source_grouping"), pt::Value::string(rs.source_grouping));
  root.set(pt::Value::string("layers"), std::move(layers));
  return root;
}

void check_objective(const std::string& o, const char* side) {
  if (o.empty() || o.find_first_of("/\\") != std::string::npos || o == "." || o == "..")
    fail("rotation set: {}_objective '{}' cannot name a file", side, o);
}

}  // namespace

void write_rotation_dir(const RotationSet& rs, const std::string& dir, const nlohmann::json& extra) {
  rs.validate();
  check_objective(rs.k_objective, "k");
  check_objective(rs.v_objective, "v");
  if (!extra.is_object()) fail("write_rotation_dir: extra manifest fields must be a JSON object");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{}: cannot create directory: {}", dir, ec.message());
  const std::string k_file = "k_rotation_" + rs.k_objective + ".pt";
  const std::string v_file = "v_rotation_" + rs.v_objective + ".pt";
  pt::save(rotation_file_value(rs, true), (fs::path(dir) / k_file).string());
  pt::save(rotation_file_value(rs, false), (fs::path(dir) / v_file).string());

  nlohmann::json m = extra;
  m["format"] = "oscar-rotations";
  m["version"] = 1;
  m["head_dim"] = rs.head_dim;
  m["group_size"] = rs.group_size;
  m["sink_tokens"] = rs.sink_tokens;
  m["recent_tokens"] = rs.recent_tokens;
  m["k_objective"] = rs.k_objective;
  m["v_objective"] = rs.v_objective;
  m["source_grouping"] = rs.source_grouping;
  m["k_file"] = k_file;
  m["v_file"] = v_file;
  m["n_layers"] = rs.layers.size();
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerRotation& l : rs.layers) {
    nlohmann::json e = {{"layer", l.layer}, {"k_clip", l.k_clip}, {"v_clip", l.v_clip}};
    if (!l.k_mean.empty()) e["k_mean"] = l.k_mean;
    if (!l.k_scale.empty()) e["k_scale"] = l.k_scale;
    layers.push_back(std::move(e));
  }
  m["layers"] = std::move(layers);
  if (!rs.kv_layers.empty()) {
    m["kv_layers"] = rs.kv_layers;
    m["kv_budget_bits"] = rs.kv_budget_bits;
  }
  const fs::path mpath = fs::path(dir) / "manifest.json";
  std::ofstream out(mpath);
  out << m.dump(1) << "\n";
  out.close();
  if (!out) fail("{}: write failed", mpath.string());
}

namespace {

// The k_/v_ file: named by the manifest, else the single match, else the default objective.
fs::path pick_file(const fs::path& dir, const nlohmann::json& manifest, const char* side, const std::string& def) {
  const std::string key = std::string(side) + "_file";
  if (manifest.contains(key)) {
    if (!manifest[key].is_string()) fail("{}: '{}' must be a string", (dir / "manifest.json").string(), key);
    const std::string name = manifest[key].get<std::string>();
    // A file of the directory, by name: never a path elsewhere (nor a device such as /dev/zero).
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos)
      fail("{}: '{}' must name a file in the directory, not \"{}\"", (dir / "manifest.json").string(), key, name);
    const fs::path p = dir / name;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec))
      fail("{}: '{}' names {}, which is not a file there", (dir / "manifest.json").string(), key, p.string());
    return p;
  }
  const std::string prefix = std::string(side) + "_rotation_";
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && e.path().extension() == ".pt") found.push_back(e.path());
  }
  if (ec) fail("{}: cannot list directory: {}", dir.string(), ec.message());
  std::sort(found.begin(), found.end());
  if (found.size() == 1) return found[0];
  const fs::path preferred = dir / (prefix + def + ".pt");
  if (found.empty()) fail("{}: no {}*.pt rotation file", dir.string(), prefix);
  if (std::find(found.begin(), found.end(), preferred) != found.end()) return preferred;
  std::vector<std::string> names;
  for (const auto& p : found) names.push_back(p.filename().string());
  fail("{}: several {}*.pt files ({}) and none is {}; name one in manifest.json", dir.string(), prefix,
       fmt::join(names, ", "), preferred.filename().string());
}

template <typename T>
T manifest_get(const nlohmann::json& m, const char* key, T def, const std::string& mpath) {
  if (!m.contains(key)) return def;
  const nlohmann::json& v = m[key];
  if constexpr (std::is_integral_v<T>) {
    static_assert(sizeof(T) < sizeof(int64_t), "the range must fit in int64");
    constexpr auto lo = std::numeric_limits<T>::min();
    constexpr auto hi = std::numeric_limits<T>::max();
    const JsonInteger x = json_integer(v, lo, hi);
    if (!x.in_range) fail("{}: '{}' must be an integer in [{}, {}], not {}", mpath, key, lo, hi, v.dump().substr(0, 40));
    return T(x.value);
  }
  try {
    return v.get<T>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: '{}' has the wrong type: {}", mpath, key, e.what());
  }
}

}  // namespace

RotationSet read_rotation_dir(const std::string& dir_str) {
  const fs::path dir(dir_str);
  if (!fs::is_directory(dir)) fail("{}: not a directory", dir_str);
  const fs::path mpath = dir / "manifest.json";
  nlohmann::json m = nlohmann::json::object();
  const bool has_manifest = fs::exists(mpath);
  if (has_manifest) {
    std::ifstream in(mpath);
    try {
      m = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: invalid JSON: {}", mpath.string(), e.what());
    }
    if (!m.is_object()) fail("{}: expected a JSON object", mpath.string());
  }
  RotationSet rs;
  const fs::path kp = pick_file(dir, m, "k", rs.k_objective);
  const fs::path vp = pick_file(dir, m, "v", rs.v_objective);
  const RotationFile kf = read_rotation_file(kp.string());
  const RotationFile vf = read_rotation_file(vp.string());
  if (kf.head_dim != vf.head_dim)
    fail("{}: K rotations are {}×{} but V rotations ({}) are {}×{}", kp.string(), kf.head_dim, kf.head_dim,
         vp.filename().string(), vf.head_dim, vf.head_dim);
  if (kf.rotations.size() != vf.rotations.size())
    fail("{}: {} K layers but {} has {} V layers", kp.string(), kf.rotations.size(), vp.filename().string(),
         vf.rotations.size());
  const std::string ms = mpath.string();
  rs.head_dim = kf.head_dim;
  if (const int md = manifest_get<int>(m, "head_dim", rs.head_dim, ms); md != rs.head_dim)
    fail("{}: head_dim {} but the rotations are {}×{}", ms, md, rs.head_dim, rs.head_dim);
  rs.group_size = manifest_get<int>(m, "group_size", std::min(128, rs.head_dim), ms);
  rs.sink_tokens = manifest_get<int>(m, "sink_tokens", 64, ms);
  rs.recent_tokens = manifest_get<int>(m, "recent_tokens", 256, ms);
  rs.k_objective = !kf.objective.empty() ? kf.objective : objective_from_name(kp, "k_rotation_");
  rs.v_objective = !vf.objective.empty() ? vf.objective : objective_from_name(vp, "v_rotation_");
  rs.source_grouping = kf.source_grouping;
  const size_t n = kf.rotations.size();
  rs.layers.resize(n);
  for (size_t i = 0; i < n; ++i) {
    LayerRotation& l = rs.layers[i];
    l.layer = static_cast<int>(i);
    l.k_rotation = kf.rotations[i];
    l.v_rotation = vf.rotations[i];
    l.k_eigenvalues = kf.eigenvalues[i];
    l.v_eigenvalues = vf.eigenvalues[i];
    l.k_clip = default_k_clip;
    l.v_clip = default_v_clip;
  }
  if (m.contains("layers")) {
    if (!m["layers"].is_array()) fail("{}: 'layers' must be an array", ms);
    for (const auto& e : m["layers"]) {
      const int l = manifest_get<int>(e, "layer", -1, ms);
      if (l < 0 || static_cast<size_t>(l) >= n) fail("{}: layer {} is not among the {} layers of the rotation files", ms, l, n);
      rs.layers[static_cast<size_t>(l)].k_clip = manifest_get<float>(e, "k_clip", default_k_clip, ms);
      rs.layers[static_cast<size_t>(l)].v_clip = manifest_get<float>(e, "v_clip", default_v_clip, ms);
      rs.layers[static_cast<size_t>(l)].k_mean = manifest_get<std::vector<float>>(e, "k_mean", {}, ms);
      rs.layers[static_cast<size_t>(l)].k_scale = manifest_get<std::vector<float>>(e, "k_scale", {}, ms);
    }
  }
  rs.kv_layers = manifest_get<std::string>(m, "kv_layers", "", ms);
  rs.kv_budget_bits = manifest_get<double>(m, "kv_budget_bits", 0.0, ms);
  try {
    rs.validate();
  } catch (const Error& e) {
    fail("{}: {}", dir_str, e.what());
  }
  return rs;
}

}  // namespace oscar
