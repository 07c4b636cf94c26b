// --k-bias-split on the GPU: the part of every score that a key bias b_k (Qwen2) puts there,
// kept out of the cache and added back in f32 (the CPU's KeyBias, src/oscar/attention/key_bias.h).
//
// The cache holds k_t − a_t, a_t = RoPE(b_k, t)·R_K (the attention prologue subtracts b_k
// before RoPE: RoPE and R_K are linear), and attention adds q·a_t to the score of key t.
// R_K is orthogonal, so with q' the query after RoPE and before R_K,
//   q·a_t = q'·RoPE(b_k, t) = Σ_i α_i cos(tθ_i) + β_i sin(tθ_i) = c·cs(t),
//   α_i = q'_a b_a + q'_b b_b,  β_i = q'_b b_a − q'_a b_b   (RoPE pair i = (a, b)),
// with c = (α_0 … α_{d/2−1}, β_0 … β_{d/2−1}) per query head (the prologue writes it) and
// cs(t) = (cos tθ_0 … , sin tθ_0 …), θ_i = position_scale·inv_freq[i]. cs(t) for the 64 keys
// of a block starting at t0 comes from cs(t0) (double sincos, once per block) and a table of
// cs(j), j < 64, by the angle sums, in f32: nothing grows with the context. The cost is d
// multiply-adds per (query head, key) in f32 on the CUDA cores (docs/cuda.md, "Key bias").
//
// key_bias_scores writes c·cs(t) of every key of every decode row for the decode kernels
// (DecodeAttentionParams::key_bias); prefill_attention computes the same inline per key tile.
//
// Self-contained like decode_attention.h: depends on the CUDA runtime only.
#pragma once
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

namespace oscar::cuda {

inline constexpr int kKeyBiasBlock = 64;  // keys per anchor: rows of the cs(j) table

// cs(j) for j < 64 as [d, 64] f32 (row i < d/2: cos jθ_i, row d/2 + i: sin jθ_i; a key's
// run of 4 is one vector load), each formed in double as RoPE forms its angles
// (j·position_scale·inv_freq[i]). inv_freq: [d / 2].
std::vector<float> key_bias_cs_table(const std::vector<double>& inv_freq, double position_scale);

struct KeyBiasScoresParams {
  int batch = 0;      // B rows (decode: one per sequence)
  int n_heads = 0;
  int head_dim = 0;   // d: 64 or 128
  const float* coef = nullptr;        // [B, n_heads, d] c per query head (AttentionPrologueParams::q_coef)
  const int32_t* seq_len = nullptr;   // [B]: row b's keys are positions [0, seq_len[b])
  const double* inv_freq = nullptr;   // [d / 2]
  double position_scale = 1.0;
  const float* cs_table = nullptr;    // [d, 64] key_bias_cs_table
  int64_t max_seq_len = 0;            // host value: ≥ every seq_len[b] (sizes the grid)
  // [B, n_heads, out_stride]: c·cs(t)·log2(e)/√d (the decode kernels' log2 units) for
  // t < seq_len[b]; the rest is not written.
  float* out = nullptr;
  int64_t out_stride = 0;             // ≥ max_seq_len
};

// Checks the parameters (std::runtime_error naming the field) and launches on `stream`.
void key_bias_scores(const KeyBiasScoresParams& p, cudaStream_t stream = nullptr);

}  // namespace oscar::cuda
