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

// Everything one launch reads and writes. Device pointers unless noted.
struct PrefillAttentionParams {
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

// Bytes of the scratch: 2 · n_kv_heads · max(max_hist_end − S, 0) · d BF16 (0 when bits = 0).
size_t prefill_attention_scratch_bytes(const PrefillAttentionParams& p);

// Checks the parameters and launches on `stream`. Throws std::runtime_error naming the
// invalid field or the failed CUDA call.
void prefill_attention(const PrefillAttentionParams& p, cudaStream_t stream = nullptr);

}  // namespace oscar::cuda
