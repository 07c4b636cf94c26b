#include "oscar/model/rotation_absorb.h"

#include <vector>

#include "oscar/core/error.h"

namespace oscar {

void rotate_value_column(const std::vector<float>& r, int d, float* base, int64_t stride) {
  OSCAR_CHECK(d > 0 && d <= 512 && r.size() == size_t(d) * size_t(d), "rotate_value_column: d {} with {} values of R", d,
              r.size());
  double tmp[512];
  for (int i = 0; i < d; ++i) {
    double acc = 0.0;
    for (int j = 0; j < d; ++j) acc += double(r[size_t(j * d + i)]) * base[j * stride];
    tmp[i] = acc;
  }
  for (int i = 0; i < d; ++i) base[i * stride] = float(tmp[i]);
}

void absorb_v_rotation(ModelWeights& w, const RotationSet& rs) {
  const ModelConfig& c = w.config;
  const int d = c.head_dim, E = c.n_embd, group = c.n_heads / c.n_kv_heads;
  if (rs.head_dim != d || int(rs.layers.size()) != c.n_layers)
    fail("rotation set ({} layers, head_dim {}) does not fit the model ({} layers, head_dim {})", rs.layers.size(),
         rs.head_dim, c.n_layers, d);
  if (!w.v_rotation_absorbable())
    fail("R_V can be folded only into f32 weights (--weights f32); quantized weights rotate values at run time");
  std::vector<double> tmp(static_cast<size_t>(d));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::vector<float>& R = rs.layers[size_t(l)].v_rotation;
    if (R.empty()) continue;
    LayerWeights& lw = w.layers[size_t(l)];
    // v'_h = Rᵀ v_h: each column e of head h's block of W_v (and its bias) is multiplied by Rᵀ.
    for (int h = 0; h < c.n_kv_heads; ++h) {
      float* block = lw.wv.mutable_f32() + int64_t(h) * d * E;
      for (int e = 0; e < E; ++e) rotate_value_column(R, d, block + e, E);
      if (!lw.bv.empty()) rotate_value_column(R, d, lw.bv.data() + int64_t(h) * d, 1);
    }
    // o = o'·Rᵀ, so W_o's columns of each query head are multiplied on the right by R.
    const int64_t cols = int64_t(c.n_heads) * d;
    for (int e = 0; e < E; ++e) {
      float* row = lw.wo.mutable_f32() + int64_t(e) * cols;
      for (int h = 0; h < c.n_heads; ++h) {
        float* seg = row + int64_t(h) * d;
        for (int i = 0; i < d; ++i) {
          double acc = 0.0;
          for (int j = 0; j < d; ++j) acc += double(seg[j]) * R[size_t(j * d + i)];
          tmp[size_t(i)] = acc;
        }
        for (int i = 0; i < d; ++i) seg[i] = float(tmp[size_t(i)]);
      }
    }
    (void)group;
  }
}

}  // namespace oscar
