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

// RMSNorm of the CTA's row (one value per thread, d threads), sum of squares in double as
// rmsnorm does.
__device__ float norm_value(float x, const float* w, int d, float eps, double* red) {
  double ss = double(x) * double(x);
  for (int off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) red[warp] = ss;
  __syncthreads();
  double total = 0.0;
  for (int i = 0; i < d / 32; ++i) total += red[i];
  const float inv = float(1.0 / sqrt(total / double(d) + double(eps)));
  return x * inv * w[threadIdx.x];
}

// The RoPE pair i = (a, b) that element e of a d-row belongs to, and whether e is its a.
struct RopePair {
  int i, a, b;
  bool first;
};
__device__ RopePair rope_pair(int e, int d, bool interleaved) {
  const int half = d / 2, i = interleaved ? e / 2 : e % half;
  return {i, interleaved ? 2 * i : i, interleaved ? 2 * i + 1 : i + half, interleaved ? e % 2 == 0 : e < half};
}

// RoPE of the CTA's row, staged in `row`: this thread's element of its pair, whose cos and
// sin (of the token's position) the caller computed once for all the CTA's heads.
__device__ float rope_value(float x, float* row, const RopePair& p, float cs, float sn) {
  row[threadIdx.x] = x;
  __syncthreads();
  const float x0 = row[p.a], x1 = row[p.b];
  __syncthreads();  // row is reused
  return p.first ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
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
// from the query after RoPE (x, this thread's element) and the KV head's bias b: the thread
// holding element a of pair i = (a, b) writes α_i to coef[i], the other β_i to coef[d/2 + i].
__device__ void key_bias_coef(float x, float* row, int d, bool interleaved, const float* bias, float* coef) {
  row[threadIdx.x] = x;
  __syncthreads();
  const RopePair p = rope_pair(threadIdx.x, d, interleaved);
  const float qa = row[p.a], qb = row[p.b], ba = bias[p.a], bb = bias[p.b];
  coef[p.first ? p.i : d / 2 + p.i] = p.first ? qa * ba + qb * bb : qb * ba - qa * bb;
  __syncthreads();  // row is reused
}

__device__ uint16_t bf16_bits(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

// grid (⌈(n_heads + n_kv_heads) / kH⌉, B), d = kD threads; a CTA takes heads [kH·x, kH·x + kH)
// of one token, query heads first, then KV heads (K and V). kH = 1 for a decode step's few
// rows; a prefill's many take kH heads per CTA, which share the token's RoPE angles and each
// load of the rotations. Launched as a programmatic dependent of the product before it
// (launch.h).
template <int kD, int kH>
__global__ void prologue_kernel(const AttentionPrologueParams p) {
  __shared__ float row[kD];
  __shared__ __align__(16) float rows[kD][kH];
  __shared__ double red[kD / 32];
  detail::wait_for_prior_grid();
  detail::allow_dependent_launch();
  const int b = blockIdx.y, e = threadIdx.x, d = kD, h0 = blockIdx.x * kH;
  const int n_all = p.n_heads + p.n_kv_heads;
  const int t = p.pos[b];
  const double angle_pos = double(t) * p.position_scale;
  const RopePair pair = rope_pair(e, d, p.interleaved);
  double sd, cd;
  sincos(angle_pos * p.inv_freq[pair.i], &sd, &cd);
  const float cs = float(cd), sn = float(sd);

  // q (query heads) or k (KV heads) normed and rotated by RoPE; v of the KV heads.
  float x[kH], v[kH];
#pragma unroll
  for (int j = 0; j < kH; ++j) {
    const int h = h0 + j;
    x[j] = v[j] = 0.0f;
    if (h >= n_all) continue;  // (uniform over the CTA)
    if (h < p.n_heads) {
      const int64_t at = (int64_t(b) * p.n_heads + h) * d + e;
      float q = p.q[at];
      if (p.q_norm) q = norm_value(q, p.q_norm, d, p.eps, red);
      q = rope_value(q, row, pair, cs, sn);
      if (p.q_coef) key_bias_coef(q, row, d, p.interleaved, p.k_bias + int64_t(h / (p.n_heads / p.n_kv_heads)) * d,
                                  p.q_coef + at - e);
      x[j] = q;
    } else {
      const int kvh = h - p.n_heads;
      const int64_t at = (int64_t(b) * p.n_kv_heads + kvh) * d + e;
      float k = p.k[at];
      v[j] = p.v[at];
      if (p.k_norm) k = norm_value(k, p.k_norm, d, p.eps, red);
      // RoPE is linear: RoPE(k − b_k) = RoPE(k) − RoPE(b_k, t), without the cancellation of
      // subtracting a large rotated bias afterwards.
      if (p.k_bias) k -= p.k_bias[kvh * d + e];
      x[j] = rope_value(k, row, pair, cs, sn);
    }
  }
  if (p.rot_k) rotate_values<kD, kH>(x, rows, p.rot_k);  // queries and keys alike
  if (p.rot_v && h0 + kH > p.n_heads) rotate_values<kD, kH>(v, rows, p.rot_v);
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
    if (p.k_shift) k -= p.k_shift[kvh * d + e];
    const int page = p.fp_blocks[int64_t(b) * p.fp_blocks_stride + t / kPageTokens];
    if (page < 0) continue;  // a released page: refused on the host side of a correct caller
    const int64_t dst = ((int64_t(page) * p.n_kv_heads + kvh) * kPageTokens + t % kPageTokens) * d + e;
    p.fp_k[dst] = bf16_bits(k);
    p.fp_v[dst] = bf16_bits(v[j]);
  }
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
  if (p.head_dim == 64)
    launch<64>(p, stream);
  else
    launch<128>(p, stream);
  check_launch(what);
}

}  // namespace oscar::cuda
