// Prefill attention on the GPU: a run of consecutive query tokens of one sequence against
// its mixed KV cache (docs/kv-layout.md §8), FlashAttention-style on tensor cores with GQA.
//
// Query token i sees keys [0, seq_len[i]): [S, hist_end[i]) from the packed history pages
// (dequantized), the rest from the BF16 fp pages: exactly what decode would show it, so a
// key that is history for a late token and still in the window for an early one is read
// in both forms (the cache keeps both while the launch runs). Design: docs/cuda.md.
//
// Self-contained: depends on the CUDA runtime only (no project code).
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace oscar::cuda {

// The queries and the cache: what the kernels take by value. Kept at 128 bytes: with a larger
// by-value parameter the compiler loads every field through the parameter's address, and
// the kernels without the key bias would change (their PTX is the same as before it).
struct PrefillAttentionInputs {
  int n_tokens = 0;    // query tokens (rows of q and out)
  int n_heads = 0;     // query heads; n_heads / n_kv_heads must be 1..8
  int n_kv_heads = 0;
  int head_dim = 0;    // d: 64 or 128
  int bits = 2;        // history codes: 2, 4 or 8; 0 = BF16-only cache (hist_* unused)
  int group = 128;     // G: 32, 64 or 128 with G <= d (ignored when bits = 0)
  int sink = 64;       // S: history starts at token S

  const float* q = nullptr;           // [n_tokens, n_heads, d], already rotated, unscaled
  // The tokens are consecutive positions of one sequence, in order: seq_len[i] = t0 + i + 1
  // and hist_end nondecreasing with hist_end[i] < seq_len[i] once past the sink (the kernel
  // stages, per key tile, the union of the rows' BF16 ranges as one interval past the sink).
  const int32_t* seq_len = nullptr;   // [n_tokens]
  const int32_t* hist_end = nullptr;  // [n_tokens] h_i: history is [S, h_i); null when bits = 0

  const uint16_t* fp_k = nullptr;      // [n_fp_blocks, n_kv_heads, 16, d] BF16 bits
  const uint16_t* fp_v = nullptr;
  const int32_t* fp_blocks = nullptr;  // the sequence's fp page table: page of token t at [t / 16]; −1 = released
  const uint8_t* hist_k = nullptr;     // [n_hist_blocks, n_kv_heads, 64 · row_bytes] (§1 rows)
  const uint8_t* hist_v = nullptr;
  const int32_t* hist_blocks = nullptr;  // page of history token t at [(t − S) / 64]

  // History rows are dequantized once per launch into a BF16 scratch that every query tile
  // reads: rows [S, max_hist_end) (host value, >= every hist_end[i] that matters, i.e.
  // min(hist_end[i], seq_len[i])), prefill_attention_scratch_bytes(*this) bytes.
  int max_hist_end = 0;
  uint16_t* scratch = nullptr;

  float* out = nullptr;  // [n_tokens, n_heads, d] f32
};
static_assert(sizeof(PrefillAttentionInputs) <= 128, "the kernels' by-value parameter outgrew 128 bytes");

// --k-bias-split: the key bias's share of each score, c·cs(t) with c = (α, β) of the row's
// query (key_bias.h), computed per key tile in f32 on the CUDA cores and added to the
// tensor-core score. A second kernel argument, so that the first keeps its size.
struct PrefillKeyBias {
  const float* coef = nullptr;      // [n_tokens, n_heads, d] (AttentionPrologueParams::q_coef); null = none
  const float* cs_table = nullptr;  // [d, 64] cs(j) for j < 64 (key_bias_cs_table)
  const double* inv_freq = nullptr; // [d / 2] RoPE frequencies, for cs(t) of each tile's first key
  double position_scale = 1.0;
};

// Everything one launch reads and writes. Device pointers unless noted.
struct PrefillAttentionParams : PrefillAttentionInputs {
  PrefillKeyBias key_bias;  // null key_bias.coef: none (kernels compiled without it)
};

// Bytes of the scratch: 2 · n_kv_heads · max(max_hist_end − S, 0) · d BF16 (0 when bits = 0).
size_t prefill_attention_scratch_bytes(const PrefillAttentionParams& p);

// Which kernel runs a launch. fastest: the Hopper one (wgmma, prefill_attention_sm90.cu) where
// it applies (d = 128 without the key bias on an sm_90 device), else the mma.sync one;
// portable: always the mma.sync one, which the tests hold the Hopper kernel beside.
enum class PrefillKernel { fastest, portable };

// Checks the parameters and launches on `stream`. Throws std::runtime_error naming the
// invalid field or the failed CUDA call.
void prefill_attention(const PrefillAttentionParams& p, cudaStream_t stream = nullptr,
                       PrefillKernel kernel = PrefillKernel::fastest);

}  // namespace oscar::cuda
