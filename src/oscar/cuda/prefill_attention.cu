// Prefill attention, FlashAttention-2 style (design: docs/cuda.md, "Prefill attention").
//
// A CTA of 4 warps takes one KV head and 64 query rows, a row being a (token, query head
// of the GQA group) pair, token-major; each warp owns 16 rows. Per tile of 64 keys the CTA
// stages the keys' BF16 rows (fp pages) and/or their history rows dequantized to BF16, then
// each warp computes S = Q·Kᵀ on tensor cores (mma.m16n8k16, BF16 in, f32 accumulate) from
// whichever source each (row, key) reads, runs the online softmax in base 2 and adds P·V
// per source, P split by the same choice. q is pre-scaled by log2(e)/√d before rounding.
// History rows are dequantized to BF16 once per launch (a scratch), not once per query tile.
// With --k-bias-split (kBias) each score also gets the key bias's share c·cs(t), in f32 on
// the CUDA cores from the rows' coefficients and the tile's cs rows (key_bias.h).
#include "oscar/cuda/prefill_attention.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "oscar/cuda/decode_attention.h"
#include "oscar/cuda/device_primitives.cuh"
#include "oscar/cuda/host_checks.h"
#include "oscar/cuda/key_bias.cuh"
#include "oscar/cuda/prefill_attention_sm90.h"

namespace oscar::cuda {
namespace {

using detail::cp_async16;
using detail::pack_bf16;
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::smem_addr;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps;  // query rows per CTA
constexpr int kKeys = 64;           // keys per tile
constexpr int kPage = kDecodeFpBlockTokens;      // tokens per fp page
constexpr int kHistRows = kDecodeHistBlockTokens;  // rows per history page
constexpr int kMaxGroup = 8;

// Shared-memory tiles: [kKeys][kDim + 8] BF16 each (the 16-byte pad spreads the rows that
// ldmatrix reads together over all banks).
// With the key bias, f32 regions follow: the rows' coefficients [kRows][d + 4], the tile's
// cs rows [kKeys][d + 4] and the anchor cs(j0) [d].
template <int kDim>
struct Tiles {
  static constexpr int kStride = kDim + 8;
  static constexpr int kElems = kKeys * kStride;
  static constexpr size_t bytes(int bits) { return size_t(bits == 0 ? 2 : 4) * kElems * sizeof(uint16_t); }
  static constexpr int kBiasStride = detail::kKeyBiasRowStride<kDim>;
  static constexpr size_t kBiasBytes = (size_t(kRows + kKeys) * kBiasStride + kDim) * sizeof(float);
  static_assert(kKeys == kKeyBiasBlock, "a key tile is one block of the key bias");
};

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Keys [j0, j0 + 64) of the fp pages into tiles (K and V); keys outside [lo, hi) (those no
// row of the CTA reads in BF16, whose rows may be stale) and released pages become zeros,
// so that P·V never meets a NaN.
template <int kDim>
__device__ void load_fp_tile(const PrefillAttentionInputs& p, int kvh, int j0, int sink, int lo, int hi,
                             uint16_t* s_k, uint16_t* s_v) {
  constexpr int kChunks = kDim / 8;  // 16-byte pieces per row
  for (int i = threadIdx.x; i < kKeys * kChunks; i += kThreads) {
    const int key = i / kChunks, ch = i % kChunks, j = j0 + key;
    const bool wanted = j < hi && (j < sink || j >= lo);
    const int page = wanted ? p.fp_blocks[j / kPage] : -1;
    const bool ok = page >= 0;
    const size_t off = ok ? ((size_t(page) * p.n_kv_heads + kvh) * kPage + size_t(j % kPage)) * kDim + ch * 8 : 0;
    cp_async16(s_k + key * Tiles<kDim>::kStride + ch * 8, p.fp_k + off, ok);
    cp_async16(s_v + key * Tiles<kDim>::kStride + ch * 8, p.fp_v + off, ok);
  }
}

// Rows of the scratch: history rows [S, max_hist_end) of every KV head, K then V.
size_t scratch_rows(const PrefillAttentionParams& p) {
  return p.bits == 0 ? 0 : size_t(std::max(p.max_hist_end - p.sink, 0));
}

// Dims [dim0, dim0 + 4) of a §1 row, x̂ = (code − z)·s rounded to BF16. In the parts
// layout 4 consecutive dims of a group are bits [b·part, b·part + b) of 4 consecutive
// code bytes: one aligned 32-bit load.
template <int kDim, int kBits>
__device__ __forceinline__ uint2 dequantize4(const uint8_t* row, int dim0, int group) {
  constexpr int kMask = (1 << kBits) - 1;
  const int group_bytes = group * kBits / 8, grp = dim0 / group, in_group = dim0 % group;
  const uint32_t word =
      *reinterpret_cast<const uint32_t*>(row + grp * group_bytes + in_group % group_bytes) >> (kBits * (in_group / group_bytes));
  const uint32_t sz = *reinterpret_cast<const uint32_t*>(row + kDim * kBits / 8 + 4 * grp);
  const float s = __half2float(__ushort_as_half(uint16_t(sz & 0xffffu)));
  const float z = __half2float(__ushort_as_half(uint16_t(sz >> 16)));
  float x[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) x[e] = (float((word >> (8 * e)) & kMask) - z) * s;
  return make_uint2(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]));
}

// The history rows [S, max_hist_end) of every KV head, K and V, dequantized once per launch
// into the scratch ([2][n_kv][rows][d] BF16), so that every query tile reads them like
// BF16 rows instead of dequantizing them again. A row is d/4 lanes; missing pages give zeros.
template <int kDim, int kBits>
__global__ void __launch_bounds__(256) dequantize_history_kernel(const PrefillAttentionInputs p, int rows) {
  constexpr int kLanesPerRow = kDim / 4, kRowsPerBlock = 256 / kLanesPerRow;
  const int x = blockIdx.x * kRowsPerBlock + int(threadIdx.x) / kLanesPerRow, kvh = blockIdx.y;
  if (x >= rows) return;
  const int dim0 = (int(threadIdx.x) % kLanesPerRow) * 4;
  const int row_bytes = kDim * kBits / 8 + 4 * (kDim / p.group);
  const int page = p.hist_blocks[x / kHistRows];
  const size_t out = (size_t(kvh) * rows + x) * kDim + dim0, plane = size_t(p.n_kv_heads) * rows * kDim;
  uint2 k = make_uint2(0u, 0u), v = k;
  if (page >= 0) {
    const size_t off =
        (size_t(page) * p.n_kv_heads + kvh) * kHistRows * size_t(row_bytes) + size_t(x % kHistRows) * row_bytes;
    k = dequantize4<kDim, kBits>(p.hist_k + off, dim0, p.group);
    v = dequantize4<kDim, kBits>(p.hist_v + off, dim0, p.group);
  }
  *reinterpret_cast<uint2*>(p.scratch + out) = k;
  *reinterpret_cast<uint2*>(p.scratch + plane + out) = v;
}

// History keys [j0, j0 + 64) ∩ [S, hi) from the scratch into tiles; other keys become zeros.
template <int kDim>
__device__ void load_hist_tile(const PrefillAttentionInputs& p, int kvh, int j0, int sink, int hi, int rows,
                               uint16_t* s_k, uint16_t* s_v) {
  constexpr int kChunks = kDim / 8;
  const size_t plane = size_t(p.n_kv_heads) * rows * kDim;
  for (int i = threadIdx.x; i < kKeys * kChunks; i += kThreads) {
    const int key = i / kChunks, ch = i % kChunks, j = j0 + key;
    const bool ok = j >= sink && j < hi;
    const size_t off = ok ? (size_t(kvh) * rows + size_t(j - sink)) * kDim + ch * 8 : 0;
    cp_async16(s_k + key * Tiles<kDim>::kStride + ch * 8, p.scratch + off, ok);
    cp_async16(s_v + key * Tiles<kDim>::kStride + ch * 8, p.scratch + plane + off, ok);
  }
}

// S (16 rows × 64 keys) += Q·Kᵀ for one warp: B fragments straight from the [key][dim]
// tile by ldmatrix (4 of them per load: two k-steps of one 8-key block).
template <int kDim>
__device__ __forceinline__ void scores(const uint32_t (&qa)[kDim / 16][4], const uint16_t* s_k, float (&s)[8][4]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kDim / 16; kk += 2) {
      uint32_t b[4];
      ldmatrix_x4(b, smem_addr(s_k + (nt * 8 + lane % 8) * Tiles<kDim>::kStride + kk * 16 + 8 * (lane / 8)));
      mma_bf16(s[nt], qa[kk], b[0], b[1]);
      mma_bf16(s[nt], qa[kk + 1], b[2], b[3]);
    }
  }
}

// O (16 rows × d) += P·V for one warp, P given as A fragments over the 4 k-steps of 16 keys.
template <int kDim>
__device__ __forceinline__ void add_pv(const uint32_t (&pa)[4][4], const uint16_t* s_v, float (&o)[kDim / 8][4]) {
  const int lane = threadIdx.x % 32, mi = lane / 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int nd = 0; nd < kDim / 16; ++nd) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, smem_addr(s_v + (kk * 16 + lane % 8 + 8 * (mi & 1)) * Tiles<kDim>::kStride + nd * 16 +
                                     8 * (mi >> 1)));
      mma_bf16(o[2 * nd], pa[kk], b[0], b[1]);
      mma_bf16(o[2 * nd + 1], pa[kk], b[2], b[3]);
    }
  }
}

// This thread's key-bias scores for one tile, added to s: rows g and g + 8 of the warp (their
// coefficients, pre-scaled to log2 units, at c0 and c0 + 8 rows) against keys nt·8 + 2c + e
// (cs rows in cs), d multiply-adds each in f32.
template <int kDim>
__device__ __forceinline__ void add_key_bias(const float* c0, const float* cs, float (&s)[8][4]) {
  constexpr int kStride = Tiles<kDim>::kBiasStride;
  const int c = threadIdx.x % 4;
#pragma unroll 2
  for (int k = 0; k < kDim; k += 4) {
    const float4 a0 = *reinterpret_cast<const float4*>(c0 + k), a1 = *reinterpret_cast<const float4*>(c0 + 8 * kStride + k);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float4 x = *reinterpret_cast<const float4*>(cs + (nt * 8 + 2 * c + e) * kStride + k);
        s[nt][e] = fmaf(a0.x, x.x, fmaf(a0.y, x.y, fmaf(a0.z, x.z, fmaf(a0.w, x.w, s[nt][e]))));
        s[nt][2 + e] = fmaf(a1.x, x.x, fmaf(a1.y, x.y, fmaf(a1.z, x.z, fmaf(a1.w, x.w, s[nt][2 + e]))));
      }
  }
}

template <int kDim, int kBits, bool kBias>
__global__ void __launch_bounds__(kThreads) prefill_attention_kernel(const PrefillAttentionInputs p,
                                                                    const PrefillKeyBias kb) {
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* s_kf = smem;
  uint16_t* s_vf = smem + Tiles<kDim>::kElems;
  uint16_t* s_kh = smem + 2 * Tiles<kDim>::kElems;  // history tiles (kBits != 0)
  uint16_t* s_vh = smem + 3 * Tiles<kDim>::kElems;
  // Key bias (kBias): after the tiles.
  float* s_coef = reinterpret_cast<float*>(smem + (kBits == 0 ? 2 : 4) * Tiles<kDim>::kElems);
  float* s_cs = s_coef + kRows * Tiles<kDim>::kBiasStride;
  float* s_anchor = s_cs + kKeys * Tiles<kDim>::kBiasStride;
  __shared__ int s_bounds[4];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int gqa = p.n_heads / p.n_kv_heads, tokens_per_cta = kRows / gqa;
  // Later tokens have more keys: hand them out first.
  const int tok0 = (gridDim.x - 1 - blockIdx.x) * tokens_per_cta, kvh = blockIdx.y;
  const int n_tok = min(tokens_per_cta, p.n_tokens - tok0);
  const int sink = p.sink;
  const int scratch_rows = kBits == 0 ? 0 : max(p.max_hist_end - sink, 0);

  // The CTA's key ranges: all keys [0, len_max); BF16 beyond the sink [fp_lo, len_max);
  // history [S, hist_hi).
  if (threadIdx.x == 0) {
    int len_max = 0, fp_lo = INT_MAX, hist_hi = 0;
    for (int i = 0; i < n_tok; ++i) {
      const int len = p.seq_len[tok0 + i];
      const int h = kBits == 0 ? sink : max(sink, min(p.hist_end[tok0 + i], len));
      len_max = max(len_max, len);
      if (h < len) fp_lo = min(fp_lo, h);
      hist_hi = max(hist_hi, h);
    }
    s_bounds[0] = len_max, s_bounds[1] = fp_lo, s_bounds[2] = min(hist_hi, sink + scratch_rows);
  }
  __syncthreads();
  const int len_max = s_bounds[0], fp_lo = s_bounds[1], hist_hi = s_bounds[2];

  // This thread's two rows (g and g + 8 of the warp's 16): token, head, keys, history end.
  int row_len[2], row_hist[2];
  const float* row_q[2];
  float* row_out[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp * 16 + g + 8 * r, tok = row / gqa, head = kvh * gqa + row % gqa;
    const bool valid = tok < n_tok;
    row_len[r] = valid ? p.seq_len[tok0 + tok] : 0;
    row_hist[r] = valid && kBits != 0 ? p.hist_end[tok0 + tok] : 0;  // 0: no key is history
    const size_t off = (size_t(tok0 + tok) * p.n_heads + head) * kDim;
    row_q[r] = valid ? p.q + off : nullptr;
    row_out[r] = valid ? p.out + off : nullptr;
  }
  int warp_len = max(row_len[0], row_len[1]);
  for (int off = 1; off < 32; off *= 2) warp_len = max(warp_len, __shfl_xor_sync(0xffffffffu, warp_len, off));

  // Q as A fragments (row-major 16 × 16 per k-step), scaled so that softmax runs in base 2.
  const float qscale = 1.4426950408889634f * rsqrtf(float(kDim));
  uint32_t qa[kDim / 16][4];
#pragma unroll
  for (int kk = 0; kk < kDim / 16; ++kk) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float2 v = make_float2(0.0f, 0.0f);
        if (row_q[r]) v = *reinterpret_cast<const float2*>(row_q[r] + kk * 16 + 8 * half + 2 * c);
        qa[kk][2 * half + r] = pack_bf16(v.x * qscale, v.y * qscale);
      }
    }
  }

  if constexpr (kBias) {
    // The rows' key-bias coefficients, in the scores' log2 units (zeros for rows past the
    // launch); read after the first tile's barriers.
    for (int i = threadIdx.x; i < kRows * kDim; i += kThreads) {
      const int row = i / kDim, k = i % kDim, tok = row / gqa;
      const float v = tok < n_tok ? kb.coef[(size_t(tok0 + tok) * p.n_heads + kvh * gqa + row % gqa) * kDim + k] : 0.0f;
      s_coef[row * Tiles<kDim>::kBiasStride + k] = v * qscale;
    }
  }

  float o[kDim / 8][4];
#pragma unroll
  for (int i = 0; i < kDim / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int j0 = 0; j0 < len_max; j0 += kKeys) {
    const bool need_fp = j0 < sink || j0 + kKeys > fp_lo;
    const bool need_hist = kBits != 0 && j0 + kKeys > sink && j0 < hist_hi;
    __syncthreads();  // the previous tile's reads are done
    if (need_fp) load_fp_tile<kDim>(p, kvh, j0, sink, fp_lo, len_max, s_kf, s_vf);
    if (need_hist) load_hist_tile<kDim>(p, kvh, j0, sink, hist_hi, scratch_rows, s_kh, s_vh);
    cp_async_commit();
    // The tile's cs rows while the copies fly (its barriers also order them after the
    // previous tile's reads).
    if constexpr (kBias)
      detail::key_bias_block_cs<kDim, kThreads>(j0, kb.inv_freq, kb.position_scale, kb.cs_table, s_anchor, s_cs);
    cp_async_wait<0>();
    __syncthreads();
    if (j0 >= warp_len) continue;  // causal: no row of this warp reaches the tile

    // Scores: each element from the source its (row, key) reads; −inf past the row's keys.
    float s[8][4];
    if (need_fp) {
      scores<kDim>(qa, s_kf, s);
    }
    if (need_hist) {
      float sh[8][4];
      scores<kDim>(qa, s_kh, sh);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = j0 + nt * 8 + 2 * c + (e & 1), r = e >> 1;
          if (j >= sink && j < row_hist[r]) s[nt][e] = sh[nt][e];
        }
    }
    if constexpr (kBias) add_key_bias<kDim>(s_coef + (warp * 16 + g) * Tiles<kDim>::kBiasStride, s_cs, s);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + nt * 8 + 2 * c + (e & 1), r = e >> 1;
        if (j >= row_len[r]) s[nt][e] = -INFINITY;
      }

    // Online softmax per row (a row's 64 keys are spread over the 4 lanes of a quad).
    float scale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet
      scale[r] = exp2f(m[r] - base);                          // m = −inf: 0 (o and l are 0)
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        s[nt][2 * r] = exp2f(s[nt][2 * r] - base);
        s[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] - base);
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      l[r] = l[r] * scale[r] + sum;
    }
#pragma unroll
    for (int i = 0; i < kDim / 8; ++i) {
      o[i][0] *= scale[0], o[i][1] *= scale[0];
      o[i][2] *= scale[1], o[i][3] *= scale[1];
    }

    // P·V per source: the C fragments of two 8-key blocks are the A fragment of a 16-key step.
#pragma unroll
    for (int src = 0; src < 2; ++src) {
      const bool hist_src = src == 1;
      if (hist_src ? !need_hist : !need_fp) continue;
      uint32_t pa[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int nt = 2 * kk + half, j = j0 + nt * 8 + 2 * c;
            float w[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const bool hist = kBits != 0 && j + e >= sink && j + e < row_hist[r];
              w[e] = hist == hist_src ? s[nt][2 * r + e] : 0.0f;
            }
            pa[kk][2 * half + r] = pack_bf16(w[0], w[1]);
          }
      add_pv<kDim>(pa, hist_src ? s_vh : s_vf, o);
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    if (!row_out[r]) continue;
#pragma unroll
    for (int i = 0; i < kDim / 8; ++i)
      *reinterpret_cast<float2*>(row_out[r] + i * 8 + 2 * c) = make_float2(o[i][2 * r] * inv, o[i][2 * r + 1] * inv);
  }
}

[[noreturn]] void fail(const std::string& what) { detail::fail("prefill_attention", what); }

using detail::aligned16;
using detail::kv_shape_problem;

void check_params(const PrefillAttentionParams& p) {
  const auto need = [](bool ok, const std::string& what) {
    if (!ok) fail(what);
  };
  need(p.n_tokens >= 0, "n_tokens " + std::to_string(p.n_tokens) + " < 0");
  const std::string shape = kv_shape_problem(p.head_dim, p.n_heads, p.n_kv_heads, p.bits, p.group, kMaxGroup,
                                             p.hist_end, p.hist_k, p.hist_v, p.hist_blocks);
  need(shape.empty(), shape);
  need(p.n_kv_heads <= 65535, "n_kv_heads " + std::to_string(p.n_kv_heads) + " outside [1, 65535] (grid y)");
  if (p.bits != 0) {
    need(p.max_hist_end >= 0 && p.max_hist_end <= INT32_MAX / 2, "max_hist_end out of range");
    need(scratch_rows(p) == 0 || (p.scratch && aligned16(p.scratch)),
         "scratch is null or not 16-byte aligned (prefill_attention_scratch_bytes)");
  }
  need(p.sink >= 0, "sink " + std::to_string(p.sink) + " < 0");
  need(p.q && p.seq_len && p.fp_k && p.fp_v && p.fp_blocks && p.out, "a required pointer is null");
  need(aligned16(p.fp_k) && aligned16(p.fp_v), "fp pools must be 16-byte aligned");
  need(!p.key_bias.coef || (p.key_bias.cs_table && p.key_bias.inv_freq), "key_bias.coef needs cs_table and inv_freq");
}

template <int kDim, int kBits, bool kBias>
void launch(const PrefillAttentionParams& p, cudaStream_t stream, bool sm90) {
  const size_t smem = Tiles<kDim>::bytes(kBits) + (kBias ? Tiles<kDim>::kBiasBytes : 0);
  constexpr auto kernel = prefill_attention_kernel<kDim, kBits, kBias>;
  // Above 48 KB a kernel must opt in (once per instantiation).
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (attr != cudaSuccess) fail(std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(attr));
  if constexpr (kBits != 0) {
    const int rows = int(scratch_rows(p));
    if (rows > 0) {
      constexpr int kRowsPerBlock = 256 / (kDim / 4);
      const dim3 dgrid(unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(p.n_kv_heads));
      dequantize_history_kernel<kDim, kBits><<<dgrid, 256, 0, stream>>>(p, rows);  // (the inputs: a slice of p)
      detail::check_launch("prefill_attention (history dequantization)");
    }
  }
  if (sm90) return detail::prefill_attention_sm90(p, stream);
  const int tokens_per_cta = kRows / (p.n_heads / p.n_kv_heads);
  const dim3 grid(unsigned((p.n_tokens + tokens_per_cta - 1) / tokens_per_cta), unsigned(p.n_kv_heads));
  kernel<<<grid, kThreads, smem, stream>>>(p, p.key_bias);
  detail::check_launch("prefill_attention");
}

template <int kDim, bool kBias>
void launch_bits(const PrefillAttentionParams& p, cudaStream_t stream, bool sm90) {
  switch (p.bits) {
    case 0: return launch<kDim, 0, kBias>(p, stream, sm90);
    case 2: return launch<kDim, 2, kBias>(p, stream, sm90);
    case 4: return launch<kDim, 4, kBias>(p, stream, sm90);
    default: return launch<kDim, 8, kBias>(p, stream, sm90);
  }
}

}  // namespace

size_t prefill_attention_scratch_bytes(const PrefillAttentionParams& p) {
  return scratch_rows(p) * size_t(std::max(p.n_kv_heads, 0)) * size_t(std::max(p.head_dim, 0)) * 2 * sizeof(uint16_t);
}

void prefill_attention(const PrefillAttentionParams& p, cudaStream_t stream, PrefillKernel kernel) {
  check_params(p);
  if (p.n_tokens == 0) return;
  const bool sm90 = kernel == PrefillKernel::fastest && detail::prefill_attention_sm90_applies(p);
  // The key bias is a template flag, so that kernels without it stay as they were.
  if (p.key_bias.coef)
    return p.head_dim == 64 ? launch_bits<64, true>(p, stream, false) : launch_bits<128, true>(p, stream, false);
  return p.head_dim == 64 ? launch_bits<64, false>(p, stream, sm90) : launch_bits<128, false>(p, stream, sm90);
}

}  // namespace oscar::cuda
