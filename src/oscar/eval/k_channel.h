// Issue 6's candidate "per-channel centring or scaling of K before the rotation" (KIVI
// quantizes keys per channel because a few key channels carry large, nearly constant
// values). A per-channel transform of the keys that attention can undo exactly:
//
//   k̃ = (k − RoPE(c, p) − m) ⊘ s,   q̃ = q ⊙ s,   q·k = q̃·k̃ + q·RoPE(c, p) + q·m
//
// and q·m is the same for every key of a query, so softmax drops it: a post-RoPE centre m
// costs nothing at run time, while a pre-RoPE centre c needs its term added to each score.
// c is a pre-RoPE per-channel centre (the mean key, QKV bias included, so centring
// generalizes --k-bias-split), s a post-RoPE per-channel scale shared by q and k. The
// cache would store k̃·R_K with R_K refitted on the statistics of q̃. Which s: a per-row
// quantizer's error on q̃·k̃ grows with E‖q̃‖²·E‖k̃‖² (the row's range follows its RMS once
// a Hadamard spreads it), and Cauchy–Schwarz gives the minimizing diagonal as
// s_c = (E k_c² / E q_c²)^{1/4}, lowering that product by the factor
// (Σ_c √(Q_c K_c))² / (Σ_c Q_c · Σ_c K_c) ≤ 1 (reported as predicted_gain).
//
// Measured with the teacher-forced per-layer attention error (kv_error.h) only; the
// result decides whether the transform enters the cache format (docs/results.md).
#pragma once
#include <span>
#include <string>
#include <vector>

#include "oscar/eval/kv_error.h"
#include "oscar/ops/rope.h"

namespace oscar {

struct KChannelVariant {
  bool center = false;  // centre on the calibration mean of the pre-RoPE key (else on b_k, as --k-bias-split)
  bool mean = false;    // subtract the post-RoPE mean m of what remains: free (q·m shifts a query's
                        // scores by one constant, which softmax cancels), so nothing is added back
  bool scale = false;   // per-channel s (else all ones)
  bool refit = false;   // refit R_K on the recording's queries (always when scaling)
  std::string name() const;
};

// One layer's transform.
struct KChannelTransform {
  std::vector<float> center;      // [n_kv, d] pre-RoPE centre; empty: none (a model without b_k, not centring)
  std::vector<float> mean;        // [n_kv, d] post-RoPE constant subtracted from every key; empty: none
  std::vector<float> scale;       // [n_kv, d] post-RoPE divisor of k and factor of q; empty: all ones
  std::vector<float> k_rotation;  // [d, d] refitted R_K (qqt_r_h_pbr on q̃); empty: keep the given one
  double predicted_gain = 1.0;    // (Σ√(Q_c K_c))² / (ΣQ_c·ΣK_c) of the centred key, mean over KV heads
};

// Fits the transform from the first n_tokens rows of a calibration recording `calib`
// (post-RoPE q, k as the model produced them). bias: the layer's b_k [n_kv·d] or empty.
KChannelTransform fit_k_channel_transform(const KChannelVariant& v, const LayerQkv& calib, int64_t n_tokens,
                                          const AttentionShape& s, const RopeFreqs& rope, std::span<const float> bias);

// x after the transform: q̃ and (k − m) ⊘ s (v as is), and the rows attention adds
// back, RoPE(c, p) ⊘ s (empty without a centre): cached_attention's k_bias_rows.
struct TransformedQkv {
  LayerQkv qkv;
  std::vector<float> split_rows;  // [n_tokens, n_kv, d]
};
TransformedQkv apply_k_channel_transform(const KChannelTransform& t, const LayerQkv& x, int64_t n_tokens,
                                         const AttentionShape& s, const RopeFreqs& rope);

struct KChannelResult {
  std::string variant;
  std::vector<double> layer_error;     // held-out attention-output error per layer
  std::vector<float> k_clip;           // per layer, searched on the calibration recording
  std::vector<double> predicted_gain;  // per layer
  double mean_error() const;
};

// Every variant of `variants` on every layer of a uniform calibrated `spec`: fitted and
// its K clip searched over `clip_grid` (V keeps rs's ratio) on `calib`, then measured on
// `eval` (last n_queries of n_tokens) against an f32 cache. The first row is `spec` with
// rs exactly as given (no search, no refit; rs's k_mean under spec.k_mean, its k_scale under
// spec.k_scale), the method as
// it ships.
std::vector<KChannelResult> compare_k_channel_variants(const Transformer& model, const QkvRecorder& calib,
                                                       const QkvRecorder& eval, int64_t n_tokens, int64_t n_queries,
                                                       const KvSpec& spec, const RotationSet& rs,
                                                       std::span<const KChannelVariant> variants,
                                                       std::span<const float> clip_grid);

}  // namespace oscar
