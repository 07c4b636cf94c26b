// The key bias's scores for decode (key_bias.h): one CTA per 256 keys of a row, all its heads.
#include "oscar/cuda/key_bias.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "oscar/cuda/host_checks.h"
#include "oscar/cuda/key_bias.cuh"

namespace oscar::cuda {
namespace {

using detail::check_launch;
using detail::fail;

// A CTA takes 256 keys (4 anchor blocks) of one row and its heads in groups of 8: thread
// (key run q = tid % 64: keys t0 + 4q … + 3, head group tid / 64) keeps 4 × 8 sums. Per RoPE
// pair i it forms the 4 keys' (cos, sin) from its block's anchor and one float4 of each table
// row, then 64 multiply-adds against the 8 heads' (α_i, β_i), read as broadcast float4s from
// shared memory ([d][32 + 4]: the coefficients of up to 32 heads at a time, each thread
// staging d/8 of them with all its loads in flight at once).
constexpr int kRunKeys = 4, kCtaKeys = 64 * kRunKeys, kGroupHeads = 8, kChunkHeads = 32;
constexpr int kCoefStride = kChunkHeads + 4;  // 16-byte rows; a warp's staging stores hit 8 banks

template <int kDim>
__global__ void __launch_bounds__(256) key_bias_scores_kernel(const KeyBiasScoresParams p) {
  constexpr int kHalf = kDim / 2, kBlocks = kCtaKeys / kKeyBiasBlock;
  __shared__ __align__(16) float s_coef[kDim][kCoefStride];
  __shared__ float s_anchor[kBlocks][kDim];
  const int tid = threadIdx.x, n_groups = blockDim.x / 64, run = tid % 64, hg = tid / 64;
  const int b = blockIdx.y, len = p.seq_len[b];
  const int64_t base = int64_t(blockIdx.x) * kCtaKeys;
  if (base >= len) return;  // uniform over the CTA
  for (int idx = tid; idx < kBlocks * kHalf; idx += blockDim.x) {
    const int blk = idx / kHalf, i = idx % kHalf;
    const float2 a = detail::key_bias_anchor(base + blk * kKeyBiasBlock, p.inv_freq, p.position_scale, i);
    s_anchor[blk][i] = a.x;
    s_anchor[blk][kHalf + i] = a.y;
  }
  const int blk = run / (kKeyBiasBlock / kRunKeys), j0 = (run % (kKeyBiasBlock / kRunKeys)) * kRunKeys;
  const int64_t t0 = base + kRunKeys * run;
  const float qscale = 1.4426950408889634f / sqrtf(float(kDim));  // the decode kernels' scale
  const float* coef = p.coef + int64_t(b) * p.n_heads * kDim;
  for (int hc = 0; hc < p.n_heads; hc += n_groups * kGroupHeads) {
    // This chunk's 8·n_groups heads × d coefficients: d/8 per thread, rows read in order.
    constexpr int kPerThread = kDim / 8;
    float v[kPerThread];
#pragma unroll
    for (int r = 0; r < kPerThread; ++r) {
      const int idx = tid + r * int(blockDim.x), h = idx / kDim;
      v[r] = hc + h < p.n_heads ? coef[int64_t(hc) * kDim + idx] : 0.0f;
    }
    __syncthreads();  // the anchors are written; the previous chunk's coefficients are read
#pragma unroll
    for (int r = 0; r < kPerThread; ++r) {
      const int idx = tid + r * int(blockDim.x);
      s_coef[idx % kDim][idx / kDim] = v[r];
    }
    __syncthreads();
    float acc[kRunKeys][kGroupHeads] = {};
#pragma unroll 4
    for (int i = 0; i < kHalf; ++i) {
      const float2 a = make_float2(s_anchor[blk][i], s_anchor[blk][kHalf + i]);
      const float4 cj = __ldg(reinterpret_cast<const float4*>(p.cs_table + i * kKeyBiasBlock + j0));
      const float4 sj = __ldg(reinterpret_cast<const float4*>(p.cs_table + (kHalf + i) * kKeyBiasBlock + j0));
      const float2 x[kRunKeys] = {detail::key_bias_turn(a, cj.x, sj.x), detail::key_bias_turn(a, cj.y, sj.y),
                                  detail::key_bias_turn(a, cj.z, sj.z), detail::key_bias_turn(a, cj.w, sj.w)};
      float al[kGroupHeads], be[kGroupHeads];
      *reinterpret_cast<float4*>(al) = *reinterpret_cast<const float4*>(&s_coef[i][hg * kGroupHeads]);
      *reinterpret_cast<float4*>(al + 4) = *reinterpret_cast<const float4*>(&s_coef[i][hg * kGroupHeads + 4]);
      *reinterpret_cast<float4*>(be) = *reinterpret_cast<const float4*>(&s_coef[kHalf + i][hg * kGroupHeads]);
      *reinterpret_cast<float4*>(be + 4) = *reinterpret_cast<const float4*>(&s_coef[kHalf + i][hg * kGroupHeads + 4]);
#pragma unroll
      for (int e = 0; e < kRunKeys; ++e)
#pragma unroll
        for (int h = 0; h < kGroupHeads; ++h) acc[e][h] = fmaf(al[h], x[e].x, fmaf(be[h], x[e].y, acc[e][h]));
    }
#pragma unroll
    for (int h = 0; h < kGroupHeads; ++h) {
      const int head = hc + hg * kGroupHeads + h;
      if (head >= p.n_heads) break;
      float* out = p.out + (int64_t(b) * p.n_heads + head) * p.out_stride;
#pragma unroll
      for (int e = 0; e < kRunKeys; ++e)
        if (t0 + e < len) out[t0 + e] = acc[e][h] * qscale;
    }
  }
}

}  // namespace

std::vector<float> key_bias_cs_table(const std::vector<double>& inv_freq, double position_scale) {
  const size_t half = inv_freq.size(), n = kKeyBiasBlock;
  std::vector<float> t(2 * half * n);
  for (size_t i = 0; i < half; ++i)
    for (size_t j = 0; j < n; ++j) {
      const double a = double(j) * position_scale * inv_freq[i];
      t[i * n + j] = float(std::cos(a));
      t[(half + i) * n + j] = float(std::sin(a));
    }
  return t;
}

void key_bias_scores(const KeyBiasScoresParams& p, cudaStream_t stream) {
  const char* what = "key_bias_scores";
  if (p.head_dim != 64 && p.head_dim != 128) fail(what, "head_dim " + std::to_string(p.head_dim) + " (64 or 128)");
  if (p.batch < 0 || p.batch > 65535) fail(what, "batch " + std::to_string(p.batch) + " outside [0, 65535]");
  if (p.n_heads <= 0) fail(what, "n_heads must be positive");
  if (p.max_seq_len < 0 || p.max_seq_len > int64_t(INT32_MAX)) fail(what, "max_seq_len out of range");
  if (p.out_stride < p.max_seq_len) fail(what, "out_stride " + std::to_string(p.out_stride) + " < max_seq_len");
  if (p.batch == 0 || p.max_seq_len == 0) return;
  if (!p.coef || !p.seq_len || !p.inv_freq || !p.cs_table || !p.out) fail(what, "a required pointer is null");
  if (!detail::aligned16(p.cs_table)) fail(what, "cs_table must be 16-byte aligned");
  // Head groups of 8 per CTA: as many as the heads fill, at most 4 (256 threads).
  const int n_groups = std::min(4, (p.n_heads + kGroupHeads - 1) / kGroupHeads);
  const dim3 grid(unsigned((p.max_seq_len + kCtaKeys - 1) / kCtaKeys), unsigned(p.batch));
  if (p.head_dim == 64)
    key_bias_scores_kernel<64><<<grid, 64 * n_groups, 0, stream>>>(p);
  else
    key_bias_scores_kernel<128><<<grid, 64 * n_groups, 0, stream>>>(p);
  check_launch(what);
}

}  // namespace oscar::cuda
