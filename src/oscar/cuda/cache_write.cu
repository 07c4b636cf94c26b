// Cache writes on the GPU: BF16 rows into fp pages, and the demotion of rows leaving the
// recent window into packed history rows, bit for bit as the CPU codec
// (src/oscar/kv/quant_codec.cpp, docs/kv-layout.md §1–§3) writes them.
#include "oscar/cuda/cache_write.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "oscar/cuda/decode_attention.h"
#include "oscar/cuda/host_checks.h"

namespace oscar::cuda {
namespace {

constexpr int kPageTokens = kDecodeFpBlockTokens;   // tokens per fp page (docs/kv-layout.md §8)
constexpr int kHistRows = kDecodeHistBlockTokens;    // rows per history page

// Element x of row·R (R row-major [d, d]), the row staged in shared memory; f32 sums.
__device__ float rotated(const float* row, const float* R, int d, int x) {
  float acc = 0.0f;
#pragma unroll 16  // the loads of R are independent: keep many in flight
  for (int i = 0; i < d; ++i) acc = fmaf(row[i], R[int64_t(i) * d + x], acc);
  return acc;
}

// grid (n_kv_heads, n_tokens, B), d threads: token t_b + blockIdx.y of sequence b, K and V.
__global__ void write_fp_rows_kernel(const FpWriteParams p) {
  __shared__ float s_row[2][128];
  const int kvh = blockIdx.x, i = blockIdx.y, b = blockIdx.z, x = threadIdx.x, d = p.head_dim;
  const int t = p.pos[b] + i;
  const int page = p.fp_blocks[int64_t(b) * p.fp_blocks_stride + t / kPageTokens];
  const int64_t src = ((int64_t(b) * p.n_tokens + i) * p.n_kv_heads + kvh) * d + x;
  float k = p.k[src], v = p.v[src];
  if (p.rot_k || p.rot_v) {
    s_row[0][x] = k;
    s_row[1][x] = v;
    __syncthreads();
    if (p.rot_k) k = rotated(s_row[0], p.rot_k, d, x);
    if (p.rot_v) v = rotated(s_row[1], p.rot_v, d, x);
  }
  if (page < 0) return;  // a released page: refused on the host side of a correct caller
  const int64_t dst = ((int64_t(page) * p.n_kv_heads + kvh) * kPageTokens + t % kPageTokens) * d + x;
  p.fp_k[dst] = __bfloat16_as_ushort(__float2bfloat16_rn(k));
  p.fp_v[dst] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// §2: the clip threshold τ = sort(|x|)[i], i = min(⌊ratio·d⌋, d − 1), over the warp's row
// (each lane holds kVals consecutive values); +inf for ratio 0 or ≥ 1 (no clipping).
// A radix select on the bits of |x| (which, the sign cleared, order as the values do):
// τ is the largest v with #{|x| < v} ≤ i, built from the top bit down, one warp-wide count
// per bit. The values come from BF16 rows, so the low 16 bits of every |x| are 0 and so
// are τ's: the search stops at bit 16. Ranking every value against every other (d²
// comparisons and d shuffles a row) made the demotion of an 8K prefill 0.68 ms a layer on
// the H200 (ncu), 8 % of its time; all 31 bits, 0.22 ms.
template <int kVals>
__device__ float clip_threshold(const float (&x)[kVals], float ratio, int d) {
  constexpr int kLowBit = 16;  // BF16 values
  if (!(ratio > 0.0f) || ratio >= 1.0f) return INFINITY;
  const unsigned idx = unsigned(min(int(floor(double(ratio) * d)), d - 1));
  uint32_t key[kVals];
#pragma unroll
  for (int i = 0; i < kVals; ++i) key[i] = __float_as_uint(fabsf(x[i]));
  // τ is also the k-th largest |x|, k = d − i: for the usual ratios (0.97 of 128: k = 4) k
  // rounds of a warp-wide maximum, each taking one copy of it out, are fewer instructions
  // than the 15 counts (an 8K prefill's demotion: 124 µs a layer before, H200, ncu).
  const int k = d - int(idx);
  if (k <= 8) {
    const int lane = threadIdx.x % 32;
    uint32_t top = 0;
    for (int round = 1;; ++round) {
      uint32_t mine = 0;
#pragma unroll
      for (int i = 0; i < kVals; ++i) mine = max(mine, key[i]);
      top = __reduce_max_sync(0xffffffffu, mine);
      if (round == k) break;
      const unsigned holders = __ballot_sync(0xffffffffu, mine == top);
      if (lane == __ffs(holders) - 1) {  // the lowest lane holding it gives up one copy
        bool taken = false;
#pragma unroll
        for (int i = 0; i < kVals; ++i)
          if (!taken && key[i] == top) key[i] = 0, taken = true;
      }
    }
    return __uint_as_float(top);
  }
  uint32_t v = 0;
#pragma unroll 1
  for (int bit = 30; bit >= kLowBit; --bit) {
    const uint32_t c = v | (1u << bit);
    unsigned below = 0;
#pragma unroll
    for (int i = 0; i < kVals; ++i) below += key[i] < c;
    if (__reduce_add_sync(0xffffffffu, below) <= idx) v = c;
  }
  return __uint_as_float(v);
}

// One warp quantizes one row (d = 32·kVals BF16 values, lane l holds dims kVals·l …) into the §1
// layout at `out`.
template <int kVals, int kBits>
__device__ void quantize_row_warp(float (&x)[kVals], float ratio, int group, uint8_t* out) {
  constexpr int d = 32 * kVals;
  const int lane = threadIdx.x % 32;
  const float tau = clip_threshold(x, ratio, d);
  float lo = INFINITY, hi = -INFINITY;
#pragma unroll
  for (int i = 0; i < kVals; ++i) {
    x[i] = fminf(fmaxf(x[i], -tau), tau);  // std::clamp for finite x
    lo = fminf(lo, x[i]);
    hi = fmaxf(hi, x[i]);
  }
  // A group is group/kVals consecutive lanes: reduce within it.
  for (int off = 1; off < group / kVals; off *= 2) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, off));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, off));
  }
  // §3 (uniform_group_params): range floored at max(|lo|, |hi|)/256, fp16 scale rounded up,
  // zero from the rounded scale rounded to nearest (0 − … gives +0, never −0).
  constexpr int levels = (1 << kBits) - 1;
  const float mag = fmaxf(fabsf(lo), fabsf(hi));
  const float range = fmaxf(hi - lo, mag * (1.0f / 256.0f));
  const float scale = fminf(fmaxf(range / float(levels), 0x1p-24f), 65504.0f);
  const __half s16 = __float2half_ru(scale);
  const float s = __half2float(s16);
  const __half z16 = __float2half_rn(fminf(fmaxf(0.0f - lo / s, -65504.0f), 65504.0f));
  const float z = __half2float(z16);
  // This lane's codes, code i in byte i (kVals ≤ 4).
  uint32_t mine = 0;
#pragma unroll
  for (int i = 0; i < kVals; ++i) {
    const float t = x[i] / s + z + 0.5f;  // uniform_code
    const int c = !(t >= 1.0f) ? 0 : t >= float(levels) ? levels : int(t);
    mine |= uint32_t(c) << (8 * i);
  }
  // Byte j' of group g holds dims g·G + j' + f·P in bit fields f (P = G·bits/8 bytes): each
  // lane makes bytes lane, lane + 32, …, gathering the codes from the lanes that hold them.
  constexpr int kPerByte = 8 / kBits, kCodeBytes = d * kBits / 8;
  const int part_log2 = __ffs(group * kBits / 8) - 1, group_log2 = __ffs(group) - 1;
#pragma unroll
  for (int j0 = 0; j0 < kCodeBytes; j0 += 32) {
    const int j = j0 + lane, jc = j < kCodeBytes ? j : 0;
    const int dim0 = ((jc >> part_log2) << group_log2) + (jc & ((1 << part_log2) - 1));
    unsigned v = 0;
#pragma unroll
    for (int f = 0; f < kPerByte; ++f) {
      const int dim = dim0 + (f << part_log2);
      const uint32_t w = __shfl_sync(0xffffffffu, mine, dim / kVals);
      v |= ((w >> (8 * (dim % kVals))) & 0xffu) << (f * kBits);
    }
    if (j < kCodeBytes) out[j] = uint8_t(v);
  }
  // The first lane of each group writes its (scale, zero): rows are whole 4-byte words.
  if (lane % (group / kVals) == 0) {
    const int g = lane * kVals / group;
    *reinterpret_cast<uint32_t*>(out + kCodeBytes + 4 * g) =
        uint32_t(__half_as_ushort(s16)) | (uint32_t(__half_as_ushort(z16)) << 16);
  }
}

// Warp 0 demotes the K row, warp 1 the V row of token hist_from[b] + row (blockIdx.y = KV
// head, blockIdx.z = sequence), from the given layer's pools.
template <int kDim>
__device__ void demote_row(const DemoteParams& p, int row, const uint16_t* fp_k, const uint16_t* fp_v, uint8_t* hist_k,
                           uint8_t* hist_v, int bits, float k_clip, float v_clip) {
  constexpr int kVals = kDim / 32;
  const int kvh = blockIdx.y, b = blockIdx.z, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = p.hist_from[b] + row;
  if (t >= p.hist_to[b]) return;
  const bool key = warp == 0;
  // The BF16 row as stored (a released fp page reads as zeros).
  const int fp_page = p.fp_blocks[int64_t(b) * p.fp_blocks_stride + t / kPageTokens];
  float x[kVals];
  if (fp_page >= 0) {
    const uint16_t* src = (key ? fp_k : fp_v) +
                          ((int64_t(fp_page) * p.n_kv_heads + kvh) * kPageTokens + t % kPageTokens) * kDim;
    using Load = std::conditional_t<kVals == 4, uint2, uint32_t>;  // the lane's kVals values at once
    const Load raw = *reinterpret_cast<const Load*>(src + lane * kVals);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&raw);
#pragma unroll
    for (int i = 0; i < kVals; ++i) x[i] = __uint_as_float(i % 2 ? w[i / 2] & 0xffff0000u : w[i / 2] << 16);
  } else {
#pragma unroll
    for (int i = 0; i < kVals; ++i) x[i] = 0.0f;
  }
  const int r = t - p.sink;
  const int hist_page = p.hist_blocks[int64_t(b) * p.hist_blocks_stride + r / kHistRows];
  if (hist_page < 0) return;  // nowhere to write: refused on the host side of a correct caller
  const int row_bytes = kDim * bits / 8 + 4 * (kDim / p.group);
  uint8_t* out = (key ? hist_k : hist_v) +
                 (int64_t(hist_page) * p.n_kv_heads + kvh) * kHistRows * row_bytes + (r % kHistRows) * row_bytes;
  const float ratio = key ? k_clip : v_clip;
  if (bits == 2)
    quantize_row_warp<kVals, 2>(x, ratio, p.group, out);
  else if (bits == 4)
    quantize_row_warp<kVals, 4>(x, ratio, p.group, out);
  else
    quantize_row_warp<kVals, 8>(x, ratio, p.group, out);
}

// grid (max_rows, n_kv_heads, B), 64 threads.
template <int kDim>
__global__ void __launch_bounds__(64) demote_kernel(const DemoteParams p) {
  demote_row<kDim>(p, int(blockIdx.x), p.fp_k, p.fp_v, p.hist_k, p.hist_v, p.bits, p.k_clip, p.v_clip);
}

// grid (n_layers · max_rows, n_kv_heads, B), 64 threads.
template <int kDim>
__global__ void __launch_bounds__(64) demote_layers_kernel(const DemoteParams p, const DemoteLayer* layers) {
  const DemoteLayer l = layers[blockIdx.x / p.max_rows];
  demote_row<kDim>(p, int(blockIdx.x % p.max_rows), l.fp_k, l.fp_v, l.hist_k, l.hist_v, l.bits, l.k_clip, l.v_clip);
}

using detail::check_launch;
using detail::fail;

// The row shape both entry points share.
void check_rows(const char* what, int batch, int n_kv_heads, int head_dim) {
  if (batch < 0 || batch > 65535) fail(what, "batch " + std::to_string(batch) + " outside [0, 65535]");
  if (head_dim != 64 && head_dim != 128) fail(what, "head_dim " + std::to_string(head_dim) + " not supported (64 or 128)");
  if (n_kv_heads <= 0) fail(what, "n_kv_heads " + std::to_string(n_kv_heads) + " <= 0");
}

}  // namespace

void write_fp_rows(const FpWriteParams& p, cudaStream_t stream) {
  const char* what = "write_fp_rows";
  check_rows(what, p.batch, p.n_kv_heads, p.head_dim);
  if (p.n_tokens < 0 || p.n_tokens > 65535) fail(what, "n_tokens " + std::to_string(p.n_tokens) + " outside [0, 65535]");
  if (p.batch == 0 || p.n_tokens == 0) return;
  if (!p.pos || !p.k || !p.v || !p.fp_k || !p.fp_v || !p.fp_blocks) fail(what, "a required pointer is null");
  const dim3 grid(unsigned(p.n_kv_heads), unsigned(p.n_tokens), unsigned(p.batch));
  write_fp_rows_kernel<<<grid, unsigned(p.head_dim), 0, stream>>>(p);
  check_launch(what);
}

namespace {

// The fields every demotion checks; `layer` false skips the per-layer ones (bits, clips, pools).
void check_demote(const char* what, const DemoteParams& p, bool layer) {
  check_rows(what, p.batch, p.n_kv_heads, p.head_dim);
  if (layer && p.bits != 2 && p.bits != 4 && p.bits != 8)
    fail(what, "bits " + std::to_string(p.bits) + " not supported (2, 4, 8)");
  if ((p.group != 32 && p.group != 64 && p.group != 128) || p.group > p.head_dim)
    fail(what, "group size " + std::to_string(p.group) + " not supported (32, 64 or 128, at most head_dim)");
  if (layer && (!(p.k_clip >= 0.0f && p.k_clip <= 1.0f) || !(p.v_clip >= 0.0f && p.v_clip <= 1.0f)))
    fail(what, "clip ratios must lie in [0, 1]");
  if (p.sink < 0) fail(what, "sink " + std::to_string(p.sink) + " < 0");
  if (p.max_rows < 0 || p.max_rows > 65535) fail(what, "max_rows " + std::to_string(p.max_rows) + " outside [0, 65535]");
  if (p.batch == 0 || p.max_rows == 0) return;
  if (!p.hist_from || !p.hist_to || !p.fp_blocks || !p.hist_blocks) fail(what, "a required pointer is null");
  if (layer && (!p.fp_k || !p.fp_v || !p.hist_k || !p.hist_v)) fail(what, "a required pointer is null");
}

}  // namespace

void demote_to_history(const DemoteParams& p, cudaStream_t stream) {
  const char* what = "demote_to_history";
  check_demote(what, p, true);
  if (p.batch == 0 || p.max_rows == 0) return;
  const dim3 grid(unsigned(p.max_rows), unsigned(p.n_kv_heads), unsigned(p.batch));
  if (p.head_dim == 64)
    demote_kernel<64><<<grid, 64, 0, stream>>>(p);
  else
    demote_kernel<128><<<grid, 64, 0, stream>>>(p);
  check_launch(what);
}

void check_demote_layer(const DemoteParams& shared, const DemoteLayer& layer) {
  DemoteParams p = shared;
  p.bits = layer.bits, p.k_clip = layer.k_clip, p.v_clip = layer.v_clip;
  p.fp_k = layer.fp_k, p.fp_v = layer.fp_v, p.hist_k = layer.hist_k, p.hist_v = layer.hist_v;
  p.batch = std::max(p.batch, 1), p.max_rows = std::max(p.max_rows, 1);  // check the pointers too
  check_demote("check_demote_layer", p, true);
}

void demote_to_history_layers(const DemoteParams& shared, const DemoteLayer* layers, int n_layers, cudaStream_t stream) {
  const char* what = "demote_to_history_layers";
  check_demote(what, shared, false);
  if (n_layers < 0 || int64_t(n_layers) * shared.max_rows > INT32_MAX)
    fail(what, "n_layers " + std::to_string(n_layers) + " out of range");
  if (shared.batch == 0 || shared.max_rows == 0 || n_layers == 0) return;
  if (!layers) fail(what, "layers is null");
  const dim3 grid(unsigned(n_layers * shared.max_rows), unsigned(shared.n_kv_heads), unsigned(shared.batch));
  if (shared.head_dim == 64)
    demote_layers_kernel<64><<<grid, 64, 0, stream>>>(shared, layers);
  else
    demote_layers_kernel<128><<<grid, 64, 0, stream>>>(shared, layers);
  check_launch(what);
}

}  // namespace oscar::cuda
