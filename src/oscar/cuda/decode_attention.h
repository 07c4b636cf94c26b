// Decode attention on the GPU over the mixed KV cache of one layer (docs/kv-layout.md §8):
// one query token per sequence, keys [sink 0..S) ‖ [history S..h) ‖ [recent h..t), with the
// sink and recent rows in BF16 fp pages and the history rows packed in the §1 layout
// (INT2/INT4/INT8, fp16 scale and zero per group) in history pages. Design: docs/cuda.md.
//
// Self-contained: depends on the CUDA runtime only (no project code), so it builds on a
// machine that has nothing but the CUDA toolkit.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace oscar::cuda {

inline constexpr int kDecodeFpBlockTokens = 16;    // tokens per fp page (KvSpec::block_tokens)
// Rows per history page: 64, so that one step of the tensor-core walk (64 INT2 rows, 32
// INT4 rows) is one contiguous bulk copy; 16-row pages took four, and the copy engine's
// per-request cost held the kernel to 0.73 of copy bandwidth (docs/cuda.md).
inline constexpr int kDecodeHistBlockTokens = 64;
inline constexpr int kDecodeTileKeys = 64;         // keys staged in shared memory at a time
inline constexpr int kDecodeMaxGroup = 8;          // query heads per KV head (GQA group)

// Everything one launch reads and writes. Device pointers unless noted; all pools must be
// 16-byte aligned (cudaMalloc gives 256). Shapes in comments; B = batch.
struct DecodeAttentionParams {
  int batch = 0;        // B sequences, one query token each
  int n_heads = 0;      // query heads; n_heads / n_kv_heads must be 1..8
  int n_kv_heads = 0;
  int head_dim = 0;     // d: 64 or 128
  int bits = 2;         // history codes: 2, 4 or 8; 0 = no history (BF16-only cache, hist_* unused)
  int group = 128;      // G: 32, 64 or 128 with G <= d (ignored when bits = 0)
  int sink = 64;        // S: history starts at token S (global)
  int chunk_keys = 0;   // keys per split-KV chunk, a multiple of 64 (decode_attention_default_chunk)
  int64_t max_seq_len = 0;  // host value: max over b of seq_len[b] (sizes the grid and workspace)
  // Host value: a bound on every sequence's BF16 keys, min(S, t_b) + (t_b − h_b) (sink and
  // recent window; S + W + 16 for window W); 0 = max_seq_len. Sizes the grid of the
  // tensor-core path, which takes the BF16 keys apart from the history: keys past a bound
  // that is too small are not attended to.
  int64_t max_window_keys = 0;
  // INT2/INT4/INT8 with G = d take the history on tensor cores (rounded q and weights;
  // docs/cuda.md); false keeps every key on the CUDA cores in f32 (for comparisons).
  bool tensor_cores = true;

  const float* q = nullptr;          // [B, n_heads, d], already rotated, unscaled
  const int32_t* seq_len = nullptr;  // [B] t_b
  const int32_t* hist_end = nullptr; // [B] h_b: history is [S, h_b) ∩ [0, t_b); null when bits = 0

  const uint16_t* fp_k = nullptr;    // [n_fp_blocks, n_kv_heads, 16, d] BF16 bits
  const uint16_t* fp_v = nullptr;
  const int32_t* fp_blocks = nullptr;  // [B, fp_blocks_stride]: page of token t at [b][t / 16]; −1 = released
  int fp_blocks_stride = 0;

  const uint8_t* hist_k = nullptr;   // [n_hist_blocks, n_kv_heads, 64 · row_bytes], rows of §1 back to back
  const uint8_t* hist_v = nullptr;
  const int32_t* hist_blocks = nullptr;  // [B, hist_blocks_stride]: page of history token t at [b][(t − S) / 64]
  int hist_blocks_stride = 0;

  float* workspace = nullptr;  // decode_attention_workspace_bytes(*this) bytes (split-KV partials)
  float* out = nullptr;        // [B, n_heads, d] f32

  // --k-bias-split: the key bias's share of each score, added to the score of key t for
  // query head h of sequence b, in the kernels' log2 units (q·a_t·log2(e)/√d, from
  // key_bias_scores) and in f32 on every path; null = none (kernels compiled without it).
  const float* key_bias = nullptr;  // [B, n_heads, key_bias_stride]
  int64_t key_bias_stride = 0;      // ≥ max_seq_len
};

// Bytes of one packed history row: d·bits/8 code bytes + 4 bytes (fp16 scale, zero) per group.
inline size_t decode_quant_row_bytes(int head_dim, int bits, int group) {
  return size_t(head_dim) * size_t(bits) / 8 + size_t(head_dim / group) * 4;
}

// A chunk size that gives the grid a few waves on `n_sm` multiprocessors without making
// the partials (group·d floats per chunk) a noticeable share of the traffic.
int decode_attention_default_chunk(int batch, int n_kv_heads, int64_t max_seq_len, int n_sm);
// The chunk for these parameters (batch, heads, max_seq_len, bits, group, tensor_cores):
// the tensor-core path wants longer chunks than the CUDA-core kernel.
int decode_attention_default_chunk(const DecodeAttentionParams& p, int n_sm);

// Workspace for the partials: [B, n_heads, n_chunks] (m, l) pairs and [B, n_heads, n_chunks, d] outputs.
size_t decode_attention_workspace_bytes(const DecodeAttentionParams& p);

// Checks the parameters and launches the split-KV kernel and the merge kernel on `stream`.
// Throws std::runtime_error naming the invalid field or the failed CUDA call.
void decode_attention(const DecodeAttentionParams& p, cudaStream_t stream = nullptr);

}  // namespace oscar::cuda
