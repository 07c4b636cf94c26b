// Device side of key_bias.h shared by key_bias_scores and prefill_attention: cs(t) of a key
// from its block's anchor cs(t0) and the cs(j) table. Internal to src/oscar/cuda (included by
// .cu files only).
#pragma once
#include <cstdint>

#include "oscar/cuda/key_bias.h"

namespace oscar::cuda::detail {

// (cos, sin) of pair i at position t0: the angle t0·position_scale·inv_freq[i] in double, as
// RoPE forms it (attention_prologue), rounded to f32.
__device__ __forceinline__ float2 key_bias_anchor(int64_t t0, const double* inv_freq, double position_scale, int i) {
  double s, c;
  sincos(double(t0) * position_scale * inv_freq[i], &s, &c);
  return make_float2(float(c), float(s));
}

// (cos, sin) at t0 + j from the anchor's (c0, s0) and the table's (cj, sj), by the angle sums
// cos(x + y) = cos x cos y − sin x sin y, sin(x + y) = sin x cos y + cos x sin y (the CPU's
// KeyBias order), in f32.
__device__ __forceinline__ float2 key_bias_turn(float2 a, float cj, float sj) {
  return make_float2(a.x * cj - a.y * sj, a.y * cj + a.x * sj);
}

// Row stride (floats) of a block's cs rows in shared memory: d + 4, so that the 8 rows a
// quarter-warp reads as float4 (at any row step of 1 or 2) fall on distinct banks.
template <int kDim>
inline constexpr int kKeyBiasRowStride = kDim + 4;

// cs(t0 + j) for the 64 keys of a block into cs[j · (d + 4) + r] (r < d/2: cos, then sin);
// table: [d, 64] (key_bias_cs_table); `anchor`: [d] f32 of shared memory. Every thread of the
// CTA (kThreads) must call it; it ends with a barrier.
template <int kDim, int kThreads>
__device__ __forceinline__ void key_bias_block_cs(int64_t t0, const double* inv_freq, double position_scale,
                                                  const float* table, float* anchor, float* cs) {
  constexpr int kHalf = kDim / 2, kStride = kKeyBiasRowStride<kDim>;
  const int tid = threadIdx.x;
  if (tid < kHalf) {
    const float2 a = key_bias_anchor(t0, inv_freq, position_scale, tid);
    anchor[tid] = a.x;
    anchor[kHalf + tid] = a.y;
  }
  __syncthreads();
  for (int idx = tid; idx < kKeyBiasBlock * kHalf; idx += kThreads) {
    const int j = idx / kHalf, i = idx % kHalf;
    const float2 x = key_bias_turn(make_float2(anchor[i], anchor[kHalf + i]), __ldg(table + i * kKeyBiasBlock + j),
                                   __ldg(table + (kHalf + i) * kKeyBiasBlock + j));
    cs[j * kStride + i] = x.x;
    cs[j * kStride + kHalf + i] = x.y;
  }
  __syncthreads();
}

}  // namespace oscar::cuda::detail
