// GPU twins of the CPU layer ops (see elementwise.h for the conventions they share).
#include "oscar/cuda/elementwise.h"

#include <cuda_bf16.h>

#include <cmath>
#include <string>

#include "oscar/cuda/device_primitives.cuh"
#include "oscar/cuda/host_checks.h"
#include "oscar/cuda/launch.h"

namespace oscar::cuda {
namespace {

constexpr int kThreads = 256;

using detail::allow_dependent_launch;
using detail::check_launch;
using detail::fail;
using detail::launch_dependent;
using detail::wait_for_prior_grid;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 65535 * 8 ? b : 65535 * 8);  // grid-stride loops take the rest
}

__device__ double block_sum(double v, double* red) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  double s = 0.0;
  for (int w = 0; w < int(blockDim.x / 32); ++w) s += red[w];
  return s;
}

__device__ uint16_t bf16_bits(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

// One CTA per row, about 4 values per thread (up to 1024 threads) so that a row's loads are
// in flight together; y16 (optional) also gets the row as BF16 for a matrix product.
// rmsnorm, swiglu and argmax are launched as programmatic dependents (launch.h) and let the
// next kernel (a decode step's product) be scheduled while they run.
__global__ void rmsnorm_kernel(const float* x, const float* w, float* y, uint16_t* y16, int n, float eps) {
  __shared__ double red[32];
  wait_for_prior_grid();
  allow_dependent_launch();
  const int64_t r = blockIdx.x;
  const float* xr = x + r * n;
  double ss = 0.0;
#pragma unroll 4
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += double(xr[i]) * double(xr[i]);
  ss = block_sum(ss, red);
  const float inv = float(1.0 / sqrt(ss / double(n) + double(eps)));
#pragma unroll 4
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i] * inv * w[i];
    y[r * n + i] = v;
    if (y16) y16[r * n + i] = bf16_bits(v);
  }
}

unsigned rmsnorm_threads(int n) {
  const int t = (n / 4 + 31) / 32 * 32;
  return unsigned(t < 32 ? 32 : t > 1024 ? 1024 : t);
}

// grid (n_tokens), threads over (head, pair).
__global__ void rope_kernel(float* x, const int32_t* pos, const double* inv_freq, double position_scale,
                            bool interleaved, int n_heads, int head_dim) {
  const int64_t tok = blockIdx.x;
  const int half = head_dim / 2;
  const double p = double(pos[tok]) * position_scale;
  for (int j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    double s, c;
    sincos(p * inv_freq[i], &s, &c);
    const float cs = float(c), sn = float(s);
    float* v = x + (tok * n_heads + h) * head_dim;
    const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * cs - x1 * sn;
    v[b] = x0 * sn + x1 * cs;
  }
}

__global__ void swiglu_kernel(float* gate, const float* up, uint16_t* out16, int64_t n) {
  wait_for_prior_grid();
  allow_dependent_launch();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    const float v = g / (1.0f + expf(-g)) * up[i];
    gate[i] = v;
    if (out16) out16[i] = bf16_bits(v);
  }
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

// One CTA per token.
__global__ void embed_kernel(const uint16_t* table, int64_t vocab, int dim, const int32_t* ids, float* out,
                             int32_t* bad_id) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  const bool ok = id >= 0 && id < vocab;
  if (!ok && threadIdx.x == 0) *bad_id = 1;
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    out[t * dim + i] = ok ? __uint_as_float(uint32_t(table[int64_t(id) * dim + i]) << 16) : 0.0f;
}

// One CTA per row: (value, index) with the larger value, the smaller index on ties; NaN loses.
__device__ __forceinline__ void better(float& v, int& i, float v2, int i2) {
  if (v2 > v || (v2 == v && i2 < i) || (v != v && v2 == v2)) v = v2, i = i2;
}

// One CTA of kArgmaxThreads per row; a vocabulary row (150K values) is 37 float4 loads per
// thread, issued eight at a time (one CTA of 256 threads with one load in flight each took
// 0.27 ms a row on the H200, 5 % of a B = 1 decode step).
constexpr int kArgmaxThreads = 1024, kArgmaxUnroll = 8;

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* logits, int n, int32_t* ids) {
  __shared__ float sv[32];
  __shared__ int si[32];
  wait_for_prior_grid();
  allow_dependent_launch();
  const float* row = logits + int64_t(blockIdx.x) * n;
  float v = NAN;
  int idx = n;
  int j = threadIdx.x;
  if (n % 4 == 0 && (reinterpret_cast<uintptr_t>(row) & 15u) == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int n4 = n / 4;
    for (; j + (kArgmaxUnroll - 1) * kArgmaxThreads < n4; j += kArgmaxUnroll * kArgmaxThreads) {
      float4 a[kArgmaxUnroll];
#pragma unroll
      for (int u = 0; u < kArgmaxUnroll; ++u) a[u] = __ldg(row4 + j + u * kArgmaxThreads);
#pragma unroll
      for (int u = 0; u < kArgmaxUnroll; ++u) {
        const int at = 4 * (j + u * kArgmaxThreads);
        better(v, idx, a[u].x, at), better(v, idx, a[u].y, at + 1), better(v, idx, a[u].z, at + 2),
            better(v, idx, a[u].w, at + 3);
      }
    }
    for (; j < n4; j += kArgmaxThreads) {
      const float4 a = __ldg(row4 + j);
      better(v, idx, a.x, 4 * j), better(v, idx, a.y, 4 * j + 1), better(v, idx, a.z, 4 * j + 2),
          better(v, idx, a.w, 4 * j + 3);
    }
  } else {
    for (; j < n; j += kArgmaxThreads) better(v, idx, __ldg(row + j), j);
  }
  for (int off = 16; off > 0; off /= 2)
    better(v, idx, __shfl_xor_sync(0xffffffffu, v, off), __shfl_xor_sync(0xffffffffu, idx, off));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) sv[warp] = v, si[warp] = idx;
  __syncthreads();
  if (threadIdx.x == 0) {
    v = sv[0];
    idx = si[0];
    for (int w = 1; w < kArgmaxThreads / 32; ++w) better(v, idx, sv[w], si[w]);
    ids[blockIdx.x] = idx < n ? idx : 0;  // all NaN: 0, as the CPU's argmax
  }
}

}  // namespace

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int n, float eps, cudaStream_t stream,
             uint16_t* y_bf16) {
  if (rows < 0 || rows > INT32_MAX || n <= 0) fail("rmsnorm", "rows " + std::to_string(rows) + ", n " + std::to_string(n) + " out of range");
  if (rows == 0) return;
  launch_dependent(rmsnorm_kernel, dim3(unsigned(rows)), dim3(rmsnorm_threads(n)), 0, stream, "rmsnorm", x, w, y,
                   y_bf16, n, eps);
}

void rope(float* x, const int32_t* pos, const double* inv_freq, double position_scale, bool interleaved,
          int64_t n_tokens, int n_heads, int head_dim, cudaStream_t stream) {
  if (n_tokens < 0 || n_tokens > INT32_MAX || n_heads <= 0 || head_dim <= 0 || head_dim % 2 != 0)
    fail("rope", "n_tokens " + std::to_string(n_tokens) + ", n_heads " + std::to_string(n_heads) + ", head_dim " +
         std::to_string(head_dim) + " out of range (head_dim even)");
  if (n_tokens == 0) return;
  rope_kernel<<<unsigned(n_tokens), kThreads, 0, stream>>>(x, pos, inv_freq, position_scale, interleaved, n_heads,
                                                            head_dim);
  check_launch("rope");
}

void swiglu(float* gate, const float* up, int64_t n, cudaStream_t stream, uint16_t* out_bf16) {
  if (n < 0) fail("swiglu", "n " + std::to_string(n) + " < 0");
  if (n == 0) return;
  launch_dependent(swiglu_kernel, dim3(blocks_for(n)), dim3(kThreads), 0, stream, "swiglu", gate, up, out_bf16, n);
}

void add_inplace(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n < 0) fail("add_inplace", "n " + std::to_string(n) + " < 0");
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, x, n);
  check_launch("add_inplace");
}

void embed_bf16(const uint16_t* table, int64_t vocab, int dim, const int32_t* ids, int64_t n_tokens, float* out,
                int32_t* bad_id, cudaStream_t stream) {
  if (vocab <= 0 || dim <= 0 || n_tokens < 0 || n_tokens > INT32_MAX)
    fail("embed_bf16", "vocab " + std::to_string(vocab) + ", dim " + std::to_string(dim) + ", n_tokens " +
         std::to_string(n_tokens) + " out of range");
  if (n_tokens == 0) return;
  embed_kernel<<<unsigned(n_tokens), kThreads, 0, stream>>>(table, vocab, dim, ids, out, bad_id);
  check_launch("embed_bf16");
}

void argmax_rows(const float* logits, int64_t rows, int64_t n, int32_t* ids, cudaStream_t stream) {
  if (rows < 0 || rows > INT32_MAX || n <= 0 || n > INT32_MAX)
    fail("argmax_rows", "rows " + std::to_string(rows) + ", n " + std::to_string(n) + " out of range");
  if (rows == 0) return;
  launch_dependent(argmax_kernel, dim3(unsigned(rows)), dim3(kArgmaxThreads), 0, stream, "argmax_rows", logits,
                   int(n), ids);
}

}  // namespace oscar::cuda
