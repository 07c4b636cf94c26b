// The per-token work between the Q/K/V products and decode attention, in one launch: per
// head, q/k RMSNorm (Qwen3), RoPE, the rotation by R_K (keys and queries) and R_V (values,
// unless absorbed), the key shift of --k-mean (one vector per KV head, which softmax
// cancels), the key bias of --k-bias-split (taken out of k before RoPE, its share of the
// scores left as coefficients per query head: key_bias.h), and the BF16 write of the
// token's K and V rows into their fp pages.
// The formulas are those of rmsnorm, rope (elementwise.h) and write_fp_rows (cache_write.h)
// run one after another; fused, a decode step saves five launches per layer, each of which
// costs more than its work at small batch (docs/cuda.md).
//
// Self-contained like decode_attention.h: depends on the CUDA runtime only.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace oscar::cuda {

struct AttentionPrologueParams {
  int batch = 0;       // B sequences, one new token each
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;    // d: 64 or 128
  const int32_t* pos = nullptr;  // [B] the new token's position (its fp page must exist)
  const float* q = nullptr;      // [B, n_heads, d] from the Q product (+ bias)
  const float* k = nullptr;      // [B, n_kv_heads, d]
  const float* v = nullptr;
  const float* q_norm = nullptr;  // [d] RMSNorm weights per head, or null (no q/k norm)
  const float* k_norm = nullptr;
  float eps = 1e-6f;
  const double* inv_freq = nullptr;  // [d / 2]
  double position_scale = 1.0;
  bool interleaved = false;          // RoPE pairs (2i, 2i+1); false: (i, i + d/2)
  const float* rot_k = nullptr;      // [d, d] row-major: q and k become x·R_K; null = none
  const float* rot_v = nullptr;      // [d, d]: v becomes v·R_V; null = none (or absorbed)
  const float* k_shift = nullptr;    // [n_kv_heads, d] subtracted from k after R_K (--k-mean); null = none
  float* q_out = nullptr;            // [B, n_heads, d]: q normed, rotated by RoPE and R_K
  uint16_t* fp_k = nullptr;          // [n_fp_blocks, n_kv_heads, 16, d] BF16 bits
  uint16_t* fp_v = nullptr;
  const int32_t* fp_blocks = nullptr;  // [B, fp_blocks_stride]: page of token t at [b][t / 16]
  int fp_blocks_stride = 0;
  // --k-bias-split (both or neither): b_k is subtracted from k after its norm, before RoPE
  // (so the cached key is k − RoPE(b_k, t)·R_K), and q_coef gets c = (α, β) of each query
  // head's q' (after RoPE, before R_K) against b_k of its KV head (key_bias.h).
  const float* k_bias = nullptr;     // [n_kv_heads, d] b_k; null = none
  float* q_coef = nullptr;           // [B, n_heads, d]
  // Rotation by product (a prefill's many rows; rot_k must be null): q_out gets q, and k_out
  // k (f32 [B, n_kv_heads, d]), normed and RoPE'd but not yet rotated, and no K row goes to
  // the fp pages (V rows still do). The caller rotates both with one matrix product each,
  // then write_prologue_keys writes the rotated keys. q_out and k_out may be q and k.
  float* k_out = nullptr;
};

// Checks the parameters (std::runtime_error naming the field) and launches on `stream`.
void attention_prologue(const AttentionPrologueParams& p, cudaStream_t stream = nullptr);

// After attention_prologue with k_out: the keys k_rot ([B, n_kv_heads, d], k_out·R_K), less
// p.k_shift where given, as BF16 into their fp pages (p's pos, fp_k, fp_blocks).
void write_prologue_keys(const AttentionPrologueParams& p, const float* k_rot, cudaStream_t stream = nullptr);

}  // namespace oscar::cuda
