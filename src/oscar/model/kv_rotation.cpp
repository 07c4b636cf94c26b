#include "oscar/model/kv_rotation.h"

#include <vector>

#include "oscar/core/error.h"
#include "oscar/kv/hadamard.h"

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
  if (kind_ == Kind::hadamard) return hadamard_transform_rows(x, n_rows, head_dim_);  // H symmetric: x·H = Hx
  if (kind_ == Kind::matrices) apply(rk_[size_t(layer)], head_dim_, x, n_rows);
}

void KvRotator::rotate_v(int layer, float* x, int64_t n_rows) const {
  if (kind_ == Kind::hadamard) return hadamard_transform_rows(x, n_rows, head_dim_);
  if (kind_ == Kind::matrices && !v_absorbed_) apply(rv_[size_t(layer)], head_dim_, x, n_rows);
}

void KvRotator::unrotate_o(int layer, float* x, int64_t n_rows) const {
  if (kind_ == Kind::hadamard) return hadamard_transform_rows(x, n_rows, head_dim_);  // H⁻¹ = Hᵀ = H
  if (kind_ == Kind::matrices && !v_absorbed_) apply(rv_t_[size_t(layer)], head_dim_, x, n_rows);
}

}  // namespace oscar
