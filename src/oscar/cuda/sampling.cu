// Top-k / top-p / min-p / temperature sampling on the GPU (sampling.h).
#include "oscar/cuda/sampling.h"

#include <cmath>
#include <string>

#include "oscar/cuda/host_checks.h"

namespace oscar::cuda {
namespace {

using detail::check_launch;
using detail::fail;

constexpr int kThreads = 256;

// (v, i) ranks before (bv, bi): larger logit first, the lower id on ties.
__device__ bool before(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

// One CTA per row. The k best by k passes, each taking the best logit after the previous
// pick (NaN never taken); then thread 0 applies top-p, min-p and the draw.
__global__ void sample_kernel(const float* logits, int64_t n, int k, float temperature, float top_p, float min_p,
                              const double* u, int32_t* ids) {
  __shared__ float cand_v[kSampleMaxTopK];
  __shared__ int cand_i[kSampleMaxTopK];
  __shared__ float red_v[kThreads / 32];
  __shared__ int red_i[kThreads / 32];
  const int64_t r = blockIdx.x;
  const float* row = logits + r * n;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float pv = INFINITY;
  int pi = -1;
  for (int round = 0; round < k; ++round) {
    float bv = -INFINITY;
    int bi = INT32_MAX;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float v = row[j];
      const bool eligible = v < pv || (v == pv && int(j) > pi);  // after the previous pick; false for NaN
      if (eligible && before(v, int(j), bv, bi)) bv = v, bi = int(j);
    }
    for (int off = 16; off > 0; off /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (before(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if (lane == 0) red_v[warp] = bv, red_i[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kThreads / 32; ++w)
        if (before(red_v[w], red_i[w], bv, bi)) bv = red_v[w], bi = red_i[w];
      cand_v[round] = bv, cand_i[round] = bi;
    }
    __syncthreads();
    pv = cand_v[round], pi = cand_i[round];
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  int kept = k;
  while (kept > 1 && cand_i[kept - 1] == INT32_MAX) --kept;  // fewer finite logits than k
  const float m = cand_v[0];
  if (top_p < 1.0f) {
    double z = 0.0;
    for (int j = 0; j < kept; ++j) z += exp(double(cand_v[j] - m));
    const double target = double(top_p) * z;
    double cum = 0.0;
    for (int j = 0; j < kept; ++j) {
      cum += exp(double(cand_v[j] - m));
      if (cum >= target) {
        kept = j + 1;
        break;
      }
    }
  }
  if (min_p > 0.0f) {
    const double threshold = double(m) + log(double(min_p));
    while (kept > 1 && double(cand_v[kept - 1]) < threshold && cand_v[kept - 1] != m) --kept;
  }
  const float inv_t = 1.0f / temperature;
  double total = 0.0;
  for (int j = 0; j < kept; ++j) total += double(expf((cand_v[j] - m) * inv_t));
  const double target = u[r] * total;
  double cum = 0.0;
  int pick = kept - 1;
  for (int j = 0; j < kept; ++j) {
    cum += double(expf((cand_v[j] - m) * inv_t));
    if (target < cum) {
      pick = j;
      break;
    }
  }
  ids[r] = cand_i[pick];
}

// temperature ≤ 0: the first largest logit (NaN never wins), as the CPU's argmax.
__global__ void argmax_kernel(const float* logits, int64_t n, int32_t* ids) {
  __shared__ float red_v[kThreads / 32];
  __shared__ int red_i[kThreads / 32];
  const float* row = logits + int64_t(blockIdx.x) * n;
  float bv = -INFINITY;
  int bi = INT32_MAX;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    if (before(row[j], int(j), bv, bi)) bv = row[j], bi = int(j);
  for (int off = 16; off > 0; off /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
    if (before(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) red_v[warp] = bv, red_i[warp] = bi;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w)
      if (before(red_v[w], red_i[w], bv, bi)) bv = red_v[w], bi = red_i[w];
    ids[blockIdx.x] = bi == INT32_MAX ? 0 : bi;
  }
}

}  // namespace

void sample_rows(const float* logits, int64_t rows, int64_t n, const SampleParams& p, const double* u, int32_t* ids,
                 cudaStream_t stream) {
  const char* what = "sample_rows";
  if (rows < 0 || rows > INT32_MAX || n <= 0 || n >= INT32_MAX)
    fail(what, "rows " + std::to_string(rows) + ", n " + std::to_string(n) + " out of range");
  if (p.temperature > 0.0f) {
    if (p.top_k < 1 || p.top_k > kSampleMaxTopK)
      fail(what, "top_k " + std::to_string(p.top_k) + " outside [1, " + std::to_string(kSampleMaxTopK) + "]");
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail(what, "top_p must be in (0, 1]");
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail(what, "min_p must be in [0, 1]");
    if (!u) fail(what, "u (one uniform per row) is null");
  }
  if (rows == 0) return;
  if (p.temperature <= 0.0f) {
    argmax_kernel<<<unsigned(rows), kThreads, 0, stream>>>(logits, n, ids);
  } else {
    const int k = int(n < p.top_k ? n : p.top_k);
    sample_kernel<<<unsigned(rows), kThreads, 0, stream>>>(logits, n, k, p.temperature, p.top_p, p.min_p, u, ids);
  }
  check_launch(what);
}

}  // namespace oscar::cuda
