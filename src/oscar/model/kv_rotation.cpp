#include "oscar/model/kv_rotation.h"

#include <vector>

#include "oscar/core/error.h"
#include "oscar/rotation/hadamard.h"

namespace oscar {

KvRotator KvRotator::hadamard(int n_layers, int head_dim) {
  hadamard_check_dim(head_dim);
  KvRotator r;
  r.kind_ = Kind::hadamard;
  r.head_dim_ = head_dim;
  (void)n_layers;
  return r;
}

KvRotator KvRotator::calibrated(const RotationSet& rs, bool v_absorbed) {
  rs.validate();
  KvRotator r;
  r.kind_ = Kind::matrices;
  r.v_absorbed_ = v_absorbed;
  r.head_dim_ = rs.head_dim;
  const int d = rs.head_dim;
  for (const LayerRotation& l : rs.layers) {
    r.rk_.push_back(l.k_rotation);
    r.rv_.push_back(l.v_rotation);
    std::vector<float> t;
    if (!l.v_rotation.empty()) {
      t.resize(size_t(d) * size_t(d));
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) t[size_t(j * d + i)] = l.v_rotation[size_t(i * d + j)];
    }
    r.rv_t_.push_back(std::move(t));
  }
  return r;
}

KvRotator KvRotator::for_spec(const KvSpec& spec, int n_layers, int head_dim, const RotationSet* rs, bool v_absorbed) {
  const bool cal = spec.uses_rotation(KvRotation::calibrated, n_layers);
  const bool had = spec.uses_rotation(KvRotation::hadamard, n_layers);
  if (cal && rs == nullptr)
    fail("KV type '{}' needs calibrated rotations (--rotations DIR|GGUF, made by `oscar calibrate`)", spec.name());
  if (!spec.mixed()) {
    if (cal) return calibrated(*rs, v_absorbed);
    if (had) return hadamard(n_layers, head_dim);
    return KvRotator();
  }
  KvRotator r;
  if (had) hadamard_check_dim(head_dim);
  if (cal) {
    rs->validate();
    if (rs->head_dim != head_dim || int(rs->layers.size()) != n_layers)
      fail("rotations are for {} layers of head_dim {}, the model has {} layers of head_dim {}", rs->layers.size(),
           rs->head_dim, n_layers, head_dim);
  }
  r.kind_ = Kind::none;
  r.v_absorbed_ = v_absorbed;
  r.head_dim_ = head_dim;
  r.rk_.resize(size_t(n_layers));
  r.rv_.resize(size_t(n_layers));
  r.rv_t_.resize(size_t(n_layers));
  for (int l = 0; l < n_layers; ++l) {
    const KvRotation k = spec.layer_rotation(l);
    r.layer_kinds_.push_back(k == KvRotation::hadamard ? Kind::hadamard : k == KvRotation::calibrated ? Kind::matrices : Kind::none);
    if (k != KvRotation::calibrated) continue;
    const LayerRotation& lr = rs->layers[size_t(l)];
    r.rk_[size_t(l)] = lr.k_rotation;
    r.rv_[size_t(l)] = lr.v_rotation;
    if (!lr.v_rotation.empty()) {
      const int d = head_dim;
      std::vector<float>& t = r.rv_t_[size_t(l)];
      t.resize(size_t(d) * size_t(d));
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) t[size_t(j * d + i)] = lr.v_rotation[size_t(i * d + j)];
    }
  }
  return r;
}

bool KvRotator::active() const {
  if (layer_kinds_.empty()) return kind_ != Kind::none;
  for (Kind k : layer_kinds_)
    if (k != Kind::none) return true;
  return false;
}

namespace {
void apply(const std::vector<float>& R, int d, float* x, int64_t n_rows) {
  if (R.empty()) return;  // identity
  std::vector<float> tmp(static_cast<size_t>(d));
  for (int64_t i = 0; i < n_rows; ++i) {
    rotate_row(R.data(), d, x + i * d, tmp.data());
    std::copy(tmp.begin(), tmp.end(), x + i * d);
  }
}
}  // namespace

void KvRotator::rotate_k(int layer, float* x, int64_t n_rows) const {
  const Kind k = kind(layer);
  if (k == Kind::hadamard) return hadamard_transform_rows(x, n_rows, head_dim_);  // H symmetric: x·H = Hx
  if (k == Kind::matrices) apply(rk_[size_t(layer)], head_dim_, x, n_rows);
}

void KvRotator::rotate_v(int layer, float* x, int64_t n_rows) const {
  const Kind k = kind(layer);
  if (k == Kind::hadamard) return hadamard_transform_rows(x, n_rows, head_dim_);
  if (k == Kind::matrices && !v_absorbed_) apply(rv_[size_t(layer)], head_dim_, x, n_rows);
}

void KvRotator::unrotate_o(int layer, float* x, int64_t n_rows) const {
  const Kind k = kind(layer);
  if (k == Kind::hadamard) return hadamard_transform_rows(x, n_rows, head_dim_);  // H⁻¹ = Hᵀ = H
  if (k == Kind::matrices && !v_absorbed_) apply(rv_t_[size_t(layer)], head_dim_, x, n_rows);
}

std::vector<float> KvRotator::k_matrix(int layer) const {
  const Kind k = kind(layer);
  if (k == Kind::hadamard) return hadamard_matrix(head_dim_);
  if (k == Kind::matrices) return rk_[size_t(layer)];
  return {};
}

std::vector<float> KvRotator::v_matrix(int layer) const {
  const Kind k = kind(layer);
  if (k == Kind::hadamard) return hadamard_matrix(head_dim_);
  if (k == Kind::matrices && !v_absorbed_) return rv_[size_t(layer)];
  return {};
}

const float* layer_key_mean(const KvSpec& spec, const RotationSet* rs, int l, int n_kv_heads, int head_dim) {
  if (!rs || !spec.k_mean || spec.layer_rotation(l) != KvRotation::calibrated) return nullptr;
  const std::vector<float>& m = rs->layers[size_t(l)].k_mean;
  if (m.empty()) return nullptr;
  if (int64_t(m.size()) != int64_t(n_kv_heads) * head_dim)
    fail("rotations: layer {} k_mean has {} values, the model needs n_kv_heads·head_dim = {}", l, m.size(),
         int64_t(n_kv_heads) * head_dim);
  return m.data();
}

const float* layer_key_scale(const KvSpec& spec, const RotationSet* rs, int l, int n_kv_heads, int head_dim) {
  if (!rs || !spec.k_scale || spec.layer_rotation(l) != KvRotation::calibrated) return nullptr;
  const std::vector<float>& s = rs->layers[size_t(l)].k_scale;
  if (s.empty()) return nullptr;
  if (int64_t(s.size()) != int64_t(n_kv_heads) * head_dim)
    fail("rotations: layer {} k_scale has {} values, the model needs n_kv_heads·head_dim = {}", l, s.size(),
         int64_t(n_kv_heads) * head_dim);
  return s.data();
}

void check_key_scale_available(const KvSpec& spec, const RotationSet* rs, int n_layers) {
  if (!spec.k_scale) return;
  if (!spec.uses_rotation(KvRotation::calibrated, n_layers))
    fail("--k-scale needs an OSCAR KV type (int2-oscar*), not '{}'", spec.name());
  if (rs)
    for (int l = 0; l < n_layers && l < int(rs->layers.size()); ++l)
      if (spec.layer_rotation(l) == KvRotation::calibrated && !rs->layers[size_t(l)].k_scale.empty()) return;
  fail("--k-scale: the rotations carry no per-channel key scale for any calibrated layer of '{}' (make one with "
       "`oscar rotations tune --k-scale`)", spec.name());
}

void scale_query_rows(const float* s, int n_heads, int n_kv_heads, int head_dim, float* q, int64_t n_rows) {
  const int group = n_heads / n_kv_heads;
  for (int64_t t = 0; t < n_rows; ++t)
    for (int h = 0; h < n_heads; ++h) {
      float* x = q + (t * n_heads + h) * head_dim;
      const float* sh = s + int64_t(h / group) * head_dim;
      for (int c = 0; c < head_dim; ++c) x[c] *= sh[c];
    }
}

void unscale_key_rows(const float* s, int n_kv_heads, int head_dim, float* k, int64_t n_rows) {
  const int64_t kvd = int64_t(n_kv_heads) * head_dim;
  for (int64_t t = 0; t < n_rows; ++t)
    for (int64_t i = 0; i < kvd; ++i) k[t * kvd + i] /= s[i];
}

}  // namespace oscar
