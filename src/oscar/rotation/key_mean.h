// The calibrated key centre of --k-mean (LayerRotation::k_mean): what the cache subtracts
// from every key of a layer. Any constant would be exact (softmax cancels a shift shared
// by all keys); the mean is the one that leaves the quantizer the least range to cover.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "oscar/ops/rope.h"

namespace oscar {

// key_sum [n_kv·d]: Σ of the post-RoPE keys over `prompts` prompts, each at positions
// 0 … per_prompt − 1. bias: the layer's b_k [n_kv·d], or empty. Returns the mean key less
// the mean of RoPE(b_k, p) over those positions: the mean of what the cache stores under
// --k-bias-split. Throws oscar::Error on mismatched sizes or no tokens.
std::vector<float> key_mean_after_split(std::span<const double> key_sum, int64_t per_prompt, int prompts,
                                        const RopeFreqs& rope, std::span<const float> bias, int n_kv_heads,
                                        int head_dim);

}  // namespace oscar
