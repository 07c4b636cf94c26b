// What the model does to q, k, v and the attention output for a KV format's rotation:
// keys (and the query, so scores are unchanged) are rotated by R_K after RoPE; values by
// R_V, unless R_V was absorbed into W_v / W_o at load, in which case v comes out of the
// projection already rotated and the output needs no un-rotation.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "oscar/kv/kv_spec.h"
#include "oscar/rotation/rotation_set.h"

namespace oscar {

// What layer l subtracts from every key under --k-mean: rs's k_mean ([n_kv_heads·head_dim],
// unrotated) when spec.k_mean is on, the layer is calibrated and the set carries one;
// else null. Throws oscar::Error naming the layer when the mean has the wrong size.
const float* layer_key_mean(const KvSpec& spec, const RotationSet* rs, int l, int n_kv_heads, int head_dim);
// What layer l divides every key by (and multiplies every query by) under --k-scale: rs's
// k_scale ([n_kv_heads·head_dim], unrotated) when spec.k_scale is on, the layer is calibrated
// and the set carries one; else null. Throws oscar::Error naming the layer on a wrong size.
const float* layer_key_scale(const KvSpec& spec, const RotationSet* rs, int l, int n_kv_heads, int head_dim);
// Throws oscar::Error when spec.k_scale is on but no calibrated layer of rs carries a k_scale
// (the flag would silently do nothing).
void check_key_scale_available(const KvSpec& spec, const RotationSet* rs, int n_layers);

// --k-scale, in the unrotated basis before R_K. s: [n_kv_heads, d].
// q [n_rows, n_heads, d] ← q ⊙ s, query head h taking KV head h / (n_heads / n_kv_heads)'s row.
void scale_query_rows(const float* s, int n_heads, int n_kv_heads, int head_dim, float* q, int64_t n_rows);
// k [n_rows, n_kv_heads, d] ← k ⊘ s.
void unscale_key_rows(const float* s, int n_kv_heads, int head_dim, float* k, int64_t n_rows);

class KvRotator {
 public:
  KvRotator() = default;  // none
  static KvRotator hadamard(int n_layers, int head_dim);
  // v_absorbed: the model's W_v / W_o already carry R_V (see absorb_v_rotation).
  static KvRotator calibrated(const RotationSet& rs, bool v_absorbed);
  // Per layer, what spec.layer_rotation(l) names: none, Hadamard, or rs's matrices (rs is
  // needed when some layer is calibrated; v_absorbed applies to those layers only).
  static KvRotator for_spec(const KvSpec& spec, int n_layers, int head_dim, const RotationSet* rs, bool v_absorbed);

  bool active() const;
  bool v_absorbed() const { return v_absorbed_; }

  // x: [n_rows, head_dim] in place.
  void rotate_k(int layer, float* x, int64_t n_rows) const;    // x ← x·R_K (queries too)
  void rotate_v(int layer, float* x, int64_t n_rows) const;    // x ← x·R_V (no-op when absorbed)
  void unrotate_o(int layer, float* x, int64_t n_rows) const;  // x ← x·R_Vᵀ (no-op when absorbed)
  // The explicit [d, d] matrices (for a backend that rotates by matrix products): R_K of
  // layer (Hadamard as H/√d), and R_V unless absorbed; empty when the layer has none.
  std::vector<float> k_matrix(int layer) const;
  std::vector<float> v_matrix(int layer) const;

 private:
  enum class Kind { none, hadamard, matrices };
  Kind kind(int layer) const { return layer_kinds_.empty() ? kind_ : layer_kinds_[size_t(layer)]; }
  Kind kind_ = Kind::none;
  std::vector<Kind> layer_kinds_;  // per layer when mixed; empty: kind_ for every layer
  bool v_absorbed_ = false;
  int head_dim_ = 0;
  std::vector<std::vector<float>> rk_, rv_, rv_t_;  // per layer [d, d]; empty: identity
};

}  // namespace oscar
