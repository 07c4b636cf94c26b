// The per-channel key scale of --k-scale (LayerRotation::k_scale) and the R_K refit it needs.
// The cache stores k̃ = (k − RoPE(b_k, p) − m) ⊘ s and attends with q ⊙ s, so q·k is exact.
// A per-row quantizer's error on q·k grows with E‖q ⊙ s‖²·E‖k̃‖² (after a Hadamard the row's
// range follows its RMS), and Cauchy–Schwarz gives the minimizing diagonal per KV head h:
//   s_c = (E k_c² / E q_c²)^{1/4}   (k: the stored key before the scale; q: h's query group)
// which lowers that product by (Σ_c √(Q_c K_c))² / (Σ_c Q_c · Σ_c K_c) ≤ 1 (predicted_gain).
// R_K is then refitted on the scaled queries: Σ_q̃ = mean_h diag(s_h)·C_Q,h·diag(s_h).
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <span>
#include <vector>

#include "oscar/rotation/rotation_fit.h"

namespace oscar {

struct KeyScaleFit {
  std::vector<float> scale;    // [n_kv·d] s > 0, geometric mean 1 per KV head (only its shape matters)
  double predicted_gain = 1.0;  // mean over KV heads of the factor above
};

// k_sq, q_sq [n_kv·d]: per-channel second moments (or sums over the same tokens: only ratios
// matter) of the stored key before the scale and of the KV head's queries. A channel below
// 1e-6 of its head's mean moment is floored there, so a dead channel gets no infinite scale.
// Throws oscar::Error on mismatched sizes.
KeyScaleFit key_scale_from_moments(std::span<const double> k_sq, std::span<const double> q_sq, int n_kv_heads,
                                   int head_dim);

// [n_kv·d] E q_c² per KV head: the diagonals of acc's per-head query covariances C_Q,h.
std::vector<double> query_channel_moments(const CovarianceAccumulator& acc);

// Σ_q̃ = mean_h diag(s_h)·C_Q,h·diag(s_h) [d, d]: the qqt objective of the scaled queries,
// from acc's per-head sums (no second pass). scale [n_kv·d].
Eigen::MatrixXd scaled_query_covariance(const CovarianceAccumulator& acc, std::span<const float> scale);

}  // namespace oscar
