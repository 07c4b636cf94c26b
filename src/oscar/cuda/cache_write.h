// Writing the mixed KV cache on the GPU (docs/kv-layout.md §1–§3, §8), in the same bytes the
// CPU cache and decode_attention use:
//   - write_fp_rows: new K and V rows (f32; rotated here by R_K / R_V when given, x·R) as
//     BF16 into their fp pages — one token per sequence in decode, a run of them in prefill;
//   - demote_to_history: the rows that leave the recent window, read back from their fp
//     pages, clipped at the row's |x| quantile (§2), quantized per group with fp16 scale and
//     zero (§3, scale rounded up, codes from the rounded pair) and packed in the parts
//     layout (§1) into history pages.
// Which pages a sequence owns (and releasing fp pages whose tokens are all history) is the
// host's page table work; these kernels only move rows.
//
// Self-contained like decode_attention.h: depends on the CUDA runtime only.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace oscar::cuda {

struct FpWriteParams {
  int batch = 0;       // B sequences
  int n_tokens = 1;    // new tokens per sequence: t_b … t_b + n_tokens − 1
  int n_kv_heads = 0;
  int head_dim = 0;    // d: 64 or 128
  const int32_t* pos = nullptr;  // [B] t_b, the first new token (its fp pages must exist)
  const float* k = nullptr;      // [B, n_tokens, n_kv_heads, d]
  const float* v = nullptr;
  const float* rot_k = nullptr;  // [d, d] row-major R_K: rows are written as x·R; null = as given
  const float* rot_v = nullptr;  // R_V (null when absorbed into the projections)
  uint16_t* fp_k = nullptr;      // [n_fp_blocks, n_kv_heads, 16, d] BF16 bits
  uint16_t* fp_v = nullptr;
  const int32_t* fp_blocks = nullptr;  // [B, fp_blocks_stride]: page of token t at [b][t / 16]
  int fp_blocks_stride = 0;
};

struct DemoteParams {
  int batch = 0;
  int n_kv_heads = 0;
  int head_dim = 0;    // d: 64 or 128
  int bits = 2;        // 2, 4 or 8
  int group = 128;     // G: 32, 64 or 128, G <= d
  int sink = 64;       // S: history row of token t is t − S
  float k_clip = 0.0f; // §2 quantile ratio in [0, 1]; 0 and 1 = no clipping
  float v_clip = 0.0f;
  int max_rows = 0;    // host value: max over b of hist_to[b] − hist_from[b] (sizes the grid)
  const int32_t* hist_from = nullptr;  // [B] rows [from, to) (token indices) become history
  const int32_t* hist_to = nullptr;
  const uint16_t* fp_k = nullptr;      // read: the rows' BF16 pages
  const uint16_t* fp_v = nullptr;
  const int32_t* fp_blocks = nullptr;
  int fp_blocks_stride = 0;
  uint8_t* hist_k = nullptr;           // written: [n_hist_blocks, n_kv_heads, 64 · row_bytes]
  uint8_t* hist_v = nullptr;
  const int32_t* hist_blocks = nullptr;  // [B, stride]: page of history token t at [b][(t − S) / 64]
  int hist_blocks_stride = 0;
};

// The per-layer part of a demotion, for demote_to_history_layers.
struct DemoteLayer {
  const uint16_t* fp_k = nullptr;
  const uint16_t* fp_v = nullptr;
  uint8_t* hist_k = nullptr;
  uint8_t* hist_v = nullptr;
  int bits = 2;
  float k_clip = 0.0f;
  float v_clip = 0.0f;
};

// Check the parameters (std::runtime_error naming the field) and launch on `stream`.
void write_fp_rows(const FpWriteParams& p, cudaStream_t stream = nullptr);
void demote_to_history(const DemoteParams& p, cudaStream_t stream = nullptr);
// The same rows of several layers in one launch (a decode step's demotion does not depend on
// the step's activations, so one launch before the layers replaces one per layer). `shared`
// gives everything but the per-layer fields (bits, clips, pools), which come from `layers`:
// n_layers records in device memory, each checked once with check_demote_layer.
void demote_to_history_layers(const DemoteParams& shared, const DemoteLayer* layers, int n_layers,
                              cudaStream_t stream = nullptr);
void check_demote_layer(const DemoteParams& shared, const DemoteLayer& layer);

}  // namespace oscar::cuda
