// Fused q/k norm, RoPE, rotations and the K/V row write of one decode step
// (attention_prologue.h).
#include "oscar/cuda/attention_prologue.h"

#include <cuda_bf16.h>

#include <string>

#include "oscar/cuda/device_primitives.cuh"
#include "oscar/cuda/host_checks.h"
#include "oscar/cuda/launch.h"

namespace oscar::cuda {
namespace {

using detail::check_launch;
using detail::fail;

constexpr int kPageTokens = 16;

// The RoPE pair i = (a, b) that element e of a d-row belongs to, and whether e is its a.
struct RopePair {
  int i, a, b;
  bool first;
};
__device__ RopePair rope_pair(int e, int d, bool interleaved) {
  const int half = d / 2, i = interleaved ? e / 2 : e % half;
  return {i, interleaved ? 2 * i : i, interleaved ? 2 * i + 1 : i + half, interleaved ? e % 2 == 0 : e < half};
}

// Each of the CTA's kH rows (one element per thread, d threads) times 1/rms of that row,
// its sum of squares in double as rmsnorm does. One barrier for all kH rows: per head, the
// barriers cost a prefill's prologue more than its arithmetic (docs/cuda.md).
template <int kD, int kH>
__device__ void rms_scale_rows(float (&x)[kH], float eps, double (*red)[kH]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int h = 0; h < kH; ++h) {
    double ss = double(x[h]) * double(x[h]);
    for (int off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) red[warp][h] = ss;
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < kH; ++h) {
    double total = 0.0;
    for (int i = 0; i < kD / 32; ++i) total += red[i][h];
    x[h] *= float(1.0 / sqrt(total / double(kD) + double(eps)));
  }
}

// RoPE of the CTA's kH rows, staged in rows[e][h]: this thread's element of its pair, whose
// cos and sin (of the token's position) are the same for all the CTA's heads.
template <int kD, int kH>
__device__ void rope_rows(float (&x)[kH], float (*rows)[kH], const RopePair& p, float cs, float sn) {
#pragma unroll
  for (int h = 0; h < kH; ++h) rows[threadIdx.x][h] = x[h];
  __syncthreads();
#pragma unroll
  for (int h = 0; h < kH; ++h) {
    const float x0 = rows[p.a][h], x1 = rows[p.b][h];
    x[h] = p.first ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
  }
  __syncthreads();  // rows is reused
}

// Asks L1 for this warp's columns of R [kD, kD] (one 128-byte line a row), lane l taking rows
// l, l + 32, ...: issued before the wait on the product before, R (a weight) arrives while
// that grid finishes and the rows are normed (the B = 1 INT2 decode prologue 12.6 -> 7.3 us a
// layer, the step 5.05 -> 4.87 ms at 8K, H200).
template <int kD>
__device__ void prefetch_rotation(const float* R) {
  const int lane = threadIdx.x % 32, col = threadIdx.x - lane;
  for (int i = lane; i < kD; i += 32) asm volatile("prefetch.global.L1 [%0];" ::"l"(R + i * kD + col));
}

// Element e of row_h·R for the CTA's kH rows at once (R row-major [kD, kD]), staged in
// shared memory [i][h]: each load of R serves kH rows. Unrolled whole, with kChains
// independent sums per row, so that the column's loads of R go out together: a loop
// unrolled 16 at a time with one sum waited on L2 once per 16 rows, and the rotation made
// the prologue 2.3x slower (5.3 -> 12.4 us a layer at the Qwen3-8B shape, ncu, H100). The
// sums of each row are those of kH = 1, in the same order.
template <int kD, int kH>
__device__ void rotate_values(float (&x)[kH], float (*rows)[kH], const float* R) {
  constexpr int kChains = 8;
  const int e = threadIdx.x;
#pragma unroll
  for (int h = 0; h < kH; ++h) rows[e][h] = x[h];
  __syncthreads();
  float acc[kH][kChains] = {};
#pragma unroll
  for (int i = 0; i < kD; ++i) {
    const float r = __ldg(R + i * kD + e);
    float xi[kH];  // row i of the staged rows: 16-byte loads where kH allows
    if constexpr (kH % 4 == 0) {
#pragma unroll
      for (int q = 0; q < kH / 4; ++q) {
        const float4 t = reinterpret_cast<const float4*>(rows[i])[q];
        xi[4 * q] = t.x, xi[4 * q + 1] = t.y, xi[4 * q + 2] = t.z, xi[4 * q + 3] = t.w;
      }
    } else {
#pragma unroll
      for (int h = 0; h < kH; ++h) xi[h] = rows[i][h];
    }
#pragma unroll
    for (int h = 0; h < kH; ++h) acc[h][i % kChains] = fmaf(xi[h], r, acc[h][i % kChains]);
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < kH; ++h) {
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kChains; ++c) sum += acc[h][c];
    x[h] = sum;
  }
}

// --k-bias-split: this thread's coefficient of q'·RoPE(b, t) = Σ_i α_i cos + β_i sin (key_bias.h),
// from the query after RoPE (x[h], this thread's element of row h) and the KV head's bias b:
// the thread holding element a of pair i = (a, b) writes α_i to coef[i], the other β_i to
// coef[d/2 + i]. Rows h with a null coef (the KV heads) only pass through the staging.
template <int kD, int kH>
__device__ void key_bias_coef_rows(const float (&x)[kH], float (*rows)[kH], const RopePair& p,
                                   const float* const (&bias)[kH], float* const (&coef)[kH]) {
#pragma unroll
  for (int h = 0; h < kH; ++h) rows[threadIdx.x][h] = x[h];
  __syncthreads();
#pragma unroll
  for (int h = 0; h < kH; ++h) {
    if (!coef[h]) continue;
    const float qa = rows[p.a][h], qb = rows[p.b][h], ba = bias[h][p.a], bb = bias[h][p.b];
    coef[h][p.first ? p.i : kD / 2 + p.i] = p.first ? qa * ba + qb * bb : qb * ba - qa * bb;
  }
  __syncthreads();  // rows is reused
}

__device__ uint16_t bf16_bits(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

// grid (⌈(n_heads + n_kv_heads) / kH⌉, B), d = kD threads; a CTA takes heads [kH·x, kH·x + kH)
// of one token, query heads first, then KV heads (K and V). kH = 1 for a decode step's few
// rows; a prefill's many take kH heads per CTA, which share the token's RoPE angles and each
// load of the rotations. Launched as a programmatic dependent of the product before it
// (launch.h).
template <int kD, int kH>
__global__ void prologue_kernel(const AttentionPrologueParams p) {
  __shared__ __align__(16) float rows[kD][kH];
  __shared__ double red[kD / 32][kH];
  const int b = blockIdx.y, e = threadIdx.x, d = kD, h0 = blockIdx.x * kH;
  const int n_all = p.n_heads + p.n_kv_heads;
  const bool rotates_v = p.rot_v && h0 + kH > p.n_heads;  // some of its heads are KV heads
  if (p.rot_k) prefetch_rotation<kD>(p.rot_k);
  if (rotates_v) prefetch_rotation<kD>(p.rot_v);
  detail::wait_for_prior_grid();
  detail::allow_dependent_launch();
  const int t = p.pos[b];
  const double angle_pos = double(t) * p.position_scale;
  const RopePair pair = rope_pair(e, d, p.interleaved);
  double sd, cd;
  sincos(angle_pos * p.inv_freq[pair.i], &sd, &cd);
  const float cs = float(cd), sn = float(sd);

  // q (query heads) or k (KV heads) normed and rotated by RoPE; v of the KV heads. Each
  // step takes all kH rows at once (past n_all: zeros, never written).
  float x[kH], v[kH];
#pragma unroll
  for (int j = 0; j < kH; ++j) {
    const int h = h0 + j;
    x[j] = v[j] = 0.0f;
    if (h >= n_all) continue;
    if (h < p.n_heads) {
      x[j] = p.q[(int64_t(b) * p.n_heads + h) * d + e];
    } else {
      const int64_t at = (int64_t(b) * p.n_kv_heads + (h - p.n_heads)) * d + e;
      x[j] = p.k[at];
      v[j] = p.v[at];
    }
  }
  if (p.q_norm) {
    rms_scale_rows<kD, kH>(x, p.eps, red);
#pragma unroll
    for (int j = 0; j < kH; ++j) x[j] *= (h0 + j < p.n_heads ? p.q_norm : p.k_norm)[e];
  }
  // RoPE is linear: RoPE(k − b_k) = RoPE(k) − RoPE(b_k, t), without the cancellation of
  // subtracting a large rotated bias afterwards.
  if (p.k_bias) {
#pragma unroll
    for (int j = 0; j < kH; ++j)
      if (h0 + j >= p.n_heads && h0 + j < n_all) x[j] -= p.k_bias[(h0 + j - p.n_heads) * d + e];
  }
  rope_rows<kD, kH>(x, rows, pair, cs, sn);
  if (p.q_coef && h0 < p.n_heads) {
    const float* bias[kH];
    float* coef[kH];
#pragma unroll
    for (int j = 0; j < kH; ++j) {
      const int h = h0 + j;
      const bool query = h < p.n_heads;
      bias[j] = query ? p.k_bias + int64_t(h / (p.n_heads / p.n_kv_heads)) * d : nullptr;
      coef[j] = query ? p.q_coef + (int64_t(b) * p.n_heads + h) * d : nullptr;
    }
    key_bias_coef_rows<kD, kH>(x, rows, pair, bias, coef);
  }
  if (p.rot_k) rotate_values<kD, kH>(x, rows, p.rot_k);  // queries and keys alike
  if (rotates_v) rotate_values<kD, kH>(v, rows, p.rot_v);
#pragma unroll
  for (int j = 0; j < kH; ++j) {
    const int h = h0 + j;
    if (h >= n_all) continue;
    if (h < p.n_heads) {
      p.q_out[(int64_t(b) * p.n_heads + h) * d + e] = x[j];
      continue;
    }
    const int kvh = h - p.n_heads;
    float k = x[j];
    if (p.k_out) p.k_out[(int64_t(b) * p.n_kv_heads + kvh) * d + e] = k;  // rotated and written later
    if (p.k_shift) k -= p.k_shift[kvh * d + e];
    const int page = p.fp_blocks[int64_t(b) * p.fp_blocks_stride + t / kPageTokens];
    if (page < 0) continue;  // a released page: refused on the host side of a correct caller
    const int64_t dst = ((int64_t(page) * p.n_kv_heads + kvh) * kPageTokens + t % kPageTokens) * d + e;
    if (!p.k_out) p.fp_k[dst] = bf16_bits(k);
    p.fp_v[dst] = bf16_bits(v[j]);
  }
}

// write_prologue_keys: eight elements a thread (two 16-byte loads, one 16-byte store),
// d/8 threads a (row, KV head), 256 threads a CTA. (One element a thread, a CTA per row and
// head: 42 µs a layer for an 8K prefill at the Qwen3-8B shape, H200, ncu.)
constexpr int kWriteKeysThreads = 256;
__global__ void __launch_bounds__(kWriteKeysThreads) write_keys_kernel(const AttentionPrologueParams p,
                                                                      const float* k_rot) {
  const int d = p.head_dim, per_row = d / 8;
  const int64_t i = int64_t(blockIdx.x) * kWriteKeysThreads + threadIdx.x, row = i / per_row;
  if (row >= int64_t(p.batch) * p.n_kv_heads) return;
  const int b = int(row / p.n_kv_heads), kvh = int(row % p.n_kv_heads), e0 = int(i % per_row) * 8;
  const int t = p.pos[b];
  const int page = p.fp_blocks[int64_t(b) * p.fp_blocks_stride + t / kPageTokens];
  if (page < 0) return;
  const float4* src = reinterpret_cast<const float4*>(k_rot + row * d + e0);
  float4 a = src[0], c = src[1];
  if (p.k_shift) {
    const float4* sh = reinterpret_cast<const float4*>(p.k_shift + kvh * d + e0);
    const float4 sa = sh[0], sc = sh[1];
    a.x -= sa.x, a.y -= sa.y, a.z -= sa.z, a.w -= sa.w;
    c.x -= sc.x, c.y -= sc.y, c.z -= sc.z, c.w -= sc.w;
  }
  using detail::pack_bf16;  // round to nearest even, as bf16_bits
  *reinterpret_cast<uint4*>(p.fp_k + ((int64_t(page) * p.n_kv_heads + kvh) * kPageTokens + t % kPageTokens) * d + e0) =
      make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(c.x, c.y), pack_bf16(c.z, c.w));
}

// Rows from which a launch takes kPrefillHeads heads per CTA: each load of R_K then serves
// eight rows (four: 0.95 ms a layer for an 8K prefill at the Qwen3-8B shape, H200, ncu).
constexpr int kPrefillRows = 64, kPrefillHeads = 8;

template <int kD>
void launch(const AttentionPrologueParams& p, cudaStream_t stream) {
  const int n_all = p.n_heads + p.n_kv_heads;
  if (p.batch >= kPrefillRows) {
    const dim3 grid(unsigned((n_all + kPrefillHeads - 1) / kPrefillHeads), unsigned(p.batch));
    detail::launch_dependent(prologue_kernel<kD, kPrefillHeads>, grid, dim3(kD), 0, stream, "attention_prologue", p);
  } else {
    detail::launch_dependent(prologue_kernel<kD, 1>, dim3(unsigned(n_all), unsigned(p.batch)), dim3(kD), 0, stream,
                             "attention_prologue", p);
  }
}

}  // namespace

void attention_prologue(const AttentionPrologueParams& p, cudaStream_t stream) {
  const char* what = "attention_prologue";
  if (p.batch < 0 || p.batch > 65535) fail(what, "batch " + std::to_string(p.batch) + " outside [0, 65535]");
  if (p.head_dim != 64 && p.head_dim != 128) fail(what, "head_dim " + std::to_string(p.head_dim) + " (64 or 128)");
  if (p.n_heads <= 0 || p.n_kv_heads <= 0 || p.n_heads + p.n_kv_heads > 65535) fail(what, "head counts out of range");
  if (p.fp_blocks_stride <= 0) fail(what, "fp_blocks_stride must be positive");
  if (p.batch == 0) return;
  if (!p.pos || !p.q || !p.k || !p.v || !p.inv_freq || !p.q_out || !p.fp_k || !p.fp_v || !p.fp_blocks)
    fail(what, "a required pointer is null");
  if (!p.q_norm != !p.k_norm) fail(what, "q_norm and k_norm come together");
  if (!p.k_bias != !p.q_coef) fail(what, "k_bias and q_coef come together");
  if (p.k_out && p.rot_k) fail(what, "k_out (rotation by product) with rot_k");
  if (p.head_dim == 64)
    launch<64>(p, stream);
  else
    launch<128>(p, stream);
  check_launch(what);
}

void write_prologue_keys(const AttentionPrologueParams& p, const float* k_rot, cudaStream_t stream) {
  const char* what = "write_prologue_keys";
  if (p.batch < 0 || p.batch > 65535) fail(what, "batch " + std::to_string(p.batch) + " outside [0, 65535]");
  if (p.head_dim != 64 && p.head_dim != 128) fail(what, "head_dim " + std::to_string(p.head_dim) + " (64 or 128)");
  if (p.n_kv_heads <= 0 || p.n_kv_heads > 65535) fail(what, "n_kv_heads out of range");
  if (p.batch == 0) return;
  if (!p.pos || !k_rot || !p.fp_k || !p.fp_blocks) fail(what, "a required pointer is null");
  const int64_t threads = int64_t(p.batch) * p.n_kv_heads * (p.head_dim / 8);
  write_keys_kernel<<<unsigned((threads + kWriteKeysThreads - 1) / kWriteKeysThreads), kWriteKeysThreads, 0, stream>>>(
      p, k_rot);
  check_launch(what);
}

}  // namespace oscar::cuda
