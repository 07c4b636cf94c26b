// Rotary position embedding. Frequencies are computed once per model (with the
// model's scaling rule); the rotation angle is formed in double so that positions
// of 100k+ tokens keep full float precision.
#pragma once
#include <cstdint>
#include <vector>

#include "oscar/model/model_config.h"

namespace oscar {

// RopeFreqs (model_dims.h) for the model's RoPE parameters and scaling rule.
RopeFreqs rope_freqs(const ModelConfig& cfg);  // throws oscar::Error for unsupported scaling

// The rotation at absolute position `pos`, for head_dim / 2 = half frequencies: cs[i] = cos and
// cs[half + i] = sin of pos·position_scale·inv_freq[i] (formed in double). cs: [2·half].
void rope_cos_sin(const RopeFreqs& f, int64_t pos, int half, float* cs);

// Rotates x: [n_heads, head_dim] in place for one token at absolute position `pos`.
void rope_apply(const RopeFreqs& f, float* x, int n_heads, int head_dim, int64_t pos);

// Appends RoPE(bias, p) for every p in [p0, p1) to `out` as [p1 − p0, n_heads, head_dim]
// rows: the part a QKV bias contributes to k at each position (--k-bias-split).
void append_rope_rows(const RopeFreqs& f, const float* bias, int n_heads, int head_dim, int64_t p0, int64_t p1,
                      std::vector<float>& out);

}  // namespace oscar
