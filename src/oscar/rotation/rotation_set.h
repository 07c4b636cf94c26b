// What OSCAR calibration produces and the KV cache consumes: per layer, the key and
// value rotations (orthogonal d×d, applied to row vectors on the right: k' = k·R_K,
// v' = v·R_V), their clip ratios, and the cache geometry they were fitted for.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace oscar {

struct LayerRotation {
  int layer = 0;
  std::vector<float> k_rotation;     // [d, d] row-major; empty: identity
  std::vector<float> v_rotation;     // [d, d] row-major; empty: identity
  std::vector<float> k_eigenvalues;  // [d] ascending, as eigh returns them (informational)
  std::vector<float> v_eigenvalues;  // [d]
  float k_clip = 0.0f;               // quantile clip ratio in [0, 1]; 0: no clipping
  float v_clip = 0.0f;
  // [n_kv_heads · d] the calibration mean of the post-RoPE key (unrotated basis, after the
  // --k-bias-split part), subtracted from every key before it is cached (--k-mean): one
  // constant shift of all keys moves each query's scores by one constant, which softmax
  // cancels, so nothing is added back. Empty: none.
  std::vector<float> k_mean;
  // [n_kv_heads · d] a per-channel post-RoPE key scale s > 0 (unrotated basis, --k-scale): the
  // cache stores ((k − m) ⊘ s)·R_K and queries become (q ⊙ s)·R_K (a KV head's query group
  // shares its s), so q·k is unchanged; R_K is then fitted on the scaled queries' statistics.
  // Empty: none.
  std::vector<float> k_scale;
};

struct RotationSet {
  int head_dim = 0;
  int group_size = 128;              // quant group along head_dim (G ≤ d, G | d)
  int sink_tokens = 64;              // BF16 prefix window
  int recent_tokens = 256;           // BF16 recent window
  std::string k_objective = "qqt_r_h_pbr";
  std::string v_objective = "sst_r_h_pbr";
  std::string source_grouping = "layer";
  std::vector<LayerRotation> layers;  // [n_layers], layers[i].layer == i
  // Per-layer KV types chosen by `oscar calibrate --kv-budget`, in the --kv-layers syntax
  // ("": none). Used at run time over an int2-oscar* --kv unless --kv-layers is given.
  std::string kv_layers;
  double kv_budget_bits = 0.0;  // the mean history bits per element they were chosen for

  // Throws oscar::Error naming the layer/field when shapes or values are inconsistent
  // (d a power of two divisible by 4, G | d, matrices d×d, clips in [0, 1], k_mean a
  // finite multiple of d long, k_scale likewise and > 0).
  void validate() const;
};

// y [d] = x [d] · R [d, d] (R row-major): rotates one key or query row at run time.
// x and y must not overlap. The dispatching version picks AVX2 when it can.
void rotate_row(const float* R, int d, const float* x, float* y);
void rotate_row_ref(const float* R, int d, const float* x, float* y);
void rotate_row_avx2(const float* R, int d, const float* x, float* y);  // d % 8 ≠ 0: reference
// y [n_rows, d] = x [n_rows, d] · R, row by row.
void rotate_rows(const float* R, int d, const float* x, float* y, int64_t n_rows);

}  // namespace oscar
