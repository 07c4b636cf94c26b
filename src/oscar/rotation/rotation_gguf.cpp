#include "oscar/rotation/rotation_gguf.h"

#include <fmt/format.h>

#include <cstring>

#include "oscar/core/error.h"

namespace oscar {

namespace {
gguf::Value f32_array(const std::vector<float>& xs) {
  gguf::Value v;
  v.type = gguf::ValueType::array;
  v.elem_type = gguf::ValueType::f32;
  for (float x : xs) {
    gguf::Value e;
    e.type = gguf::ValueType::f32;
    e.f = x;
    v.array.push_back(e);
  }
  return v;
}

std::vector<uint8_t> bytes_of(const std::vector<float>& x) {
  std::vector<uint8_t> b(x.size() * 4);
  std::memcpy(b.data(), x.data(), b.size());
  return b;
}

std::vector<float> read_matrix(const gguf::GgufFile& f, const std::string& name, int d) {
  const gguf::TensorInfo& t = f.tensor(name);
  if (t.type != GgmlType::f32 || t.ne.size() != 2 || t.ne[0] != uint64_t(d) || t.ne[1] != uint64_t(d))
    fail("{}: tensor '{}' must be F32 [{}, {}]", f.path(), name, d, d);
  return f.dequantize(t);
}
// Optional per-layer per-channel vector oscar.<what>.<l> (k_mean, k_scale), F32 [d, n_kv_heads].
std::vector<float> read_per_channel(const gguf::GgufFile& f, const char* what, int l, int d) {
  const gguf::TensorInfo* t = f.find_tensor(fmt::format("oscar.{}.{}", what, l));
  if (!t) return {};
  if (t->type != GgmlType::f32 || t->ne.size() != 2 || t->ne[0] != uint64_t(d) || t->ne[1] == 0 || t->ne[1] > 1024)
    fail("{}: tensor 'oscar.{}.{}' must be F32 [{}, n_kv_heads]", f.path(), what, l, d);
  return f.dequantize(*t);
}
}  // namespace

void embed_rotations(const gguf::GgufFile& model, const RotationSet& rs, const std::string& out_path) {
  rs.validate();
  // Refusing is clearer than silently keeping two sets of rotations in one file.
  if (model.find("oscar.version")) fail("{} already holds OSCAR rotations; embed into the original model", model.path());
  gguf::GgufWriter w;
  w.copy_from(model);
  const int n = int(rs.layers.size()), d = rs.head_dim;
  w.set_u32("oscar.version", 1);
  w.set_u32("oscar.layer_count", uint32_t(n));
  w.set_u32("oscar.head_dim", uint32_t(d));
  w.set_u32("oscar.group_size", uint32_t(rs.group_size));
  w.set_u32("oscar.sink_tokens", uint32_t(rs.sink_tokens));
  w.set_u32("oscar.recent_tokens", uint32_t(rs.recent_tokens));
  w.set_string("oscar.k_objective", rs.k_objective);
  w.set_string("oscar.v_objective", rs.v_objective);
  w.set_string("oscar.source_grouping", rs.source_grouping);
  std::vector<float> kc, vc;
  for (const LayerRotation& l : rs.layers) {
    kc.push_back(l.k_clip);
    vc.push_back(l.v_clip);
    const std::vector<float> eye = [&] {
      std::vector<float> m(size_t(d) * size_t(d), 0.0f);
      for (int i = 0; i < d; ++i) m[size_t(i * d + i)] = 1.0f;
      return m;
    }();
    w.add_tensor(fmt::format("oscar.rot_k.{}", l.layer), GgmlType::f32, {uint64_t(d), uint64_t(d)},
                 bytes_of(l.k_rotation.empty() ? eye : l.k_rotation));
    w.add_tensor(fmt::format("oscar.rot_v.{}", l.layer), GgmlType::f32, {uint64_t(d), uint64_t(d)},
                 bytes_of(l.v_rotation.empty() ? eye : l.v_rotation));
    if (!l.k_mean.empty())
      w.add_tensor(fmt::format("oscar.k_mean.{}", l.layer), GgmlType::f32, {uint64_t(d), uint64_t(l.k_mean.size()) / uint64_t(d)},
                   bytes_of(l.k_mean));
    if (!l.k_scale.empty())
      w.add_tensor(fmt::format("oscar.k_scale.{}", l.layer), GgmlType::f32,
                   {uint64_t(d), uint64_t(l.k_scale.size()) / uint64_t(d)}, bytes_of(l.k_scale));
  }
  w.set("oscar.k_clip", f32_array(kc));
  w.set("oscar.v_clip", f32_array(vc));
  if (!rs.kv_layers.empty()) {
    w.set_string("oscar.kv_layers", rs.kv_layers);
    w.set_f32("oscar.kv_budget_bits", float(rs.kv_budget_bits));
  }
  w.write(out_path);
}

std::optional<RotationSet> read_embedded_rotations(const gguf::GgufFile& f) {
  if (!f.find("oscar.version")) return std::nullopt;
  if (f.get_int("oscar.version") != 1) fail("{}: unsupported oscar.version {}", f.path(), f.get_int("oscar.version"));
  RotationSet rs;
  const int64_t n = f.get_int("oscar.layer_count"), d = f.get_int("oscar.head_dim");
  if (n <= 0 || n > 4096 || d <= 0 || d > 1024) fail("{}: oscar.layer_count {} / oscar.head_dim {} out of range", f.path(), n, d);
  rs.head_dim = int(d);
  rs.group_size = int(f.get_int("oscar.group_size"));
  rs.sink_tokens = int(f.get_int("oscar.sink_tokens"));
  rs.recent_tokens = int(f.get_int("oscar.recent_tokens"));
  rs.k_objective = f.get_string("oscar.k_objective");
  rs.v_objective = f.get_string("oscar.v_objective");
  rs.source_grouping = f.get_string("oscar.source_grouping", "layer");
  const std::vector<double> kc = f.get_float_array("oscar.k_clip"), vc = f.get_float_array("oscar.v_clip");
  if (int64_t(kc.size()) != n || int64_t(vc.size()) != n)
    fail("{}: oscar.k_clip / oscar.v_clip must have {} entries", f.path(), n);
  for (int l = 0; l < n; ++l) {
    LayerRotation lr;
    lr.layer = l;
    lr.k_rotation = read_matrix(f, fmt::format("oscar.rot_k.{}", l), int(d));
    lr.v_rotation = read_matrix(f, fmt::format("oscar.rot_v.{}", l), int(d));
    lr.k_clip = float(kc[size_t(l)]);
    lr.v_clip = float(vc[size_t(l)]);
    lr.k_mean = read_per_channel(f, "k_mean", l, int(d));
    lr.k_scale = read_per_channel(f, "k_scale", l, int(d));
    rs.layers.push_back(std::move(lr));
  }
  rs.kv_layers = f.get_string("oscar.kv_layers", "");
  rs.kv_budget_bits = f.get_float("oscar.kv_budget_bits", 0.0);
  try {
    rs.validate();
  } catch (const Error& e) {
    fail("{}: {}", f.path(), e.what());
  }
  return rs;
}

}  // namespace oscar
