// GPU twins of the CPU layer ops (see elementwise.h for the conventions they share).
#include "oscar/cuda/elementwise.h"

#include <cuda_bf16.h>

#include <cmath>
#include <string>

#include "oscar/cuda/host_checks.h"

namespace oscar::cuda {
namespace {

constexpr int kThreads = 256;

using detail::check_launch;
using detail::fail;

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
__global__ void rmsnorm_kernel(const float* x, const float* w, float* y, uint16_t* y16, int n, float eps) {
  __shared__ double red[32];
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
__device__ void better(float& v, int64_t& i, float v2, int64_t i2) {
  if (v2 > v || (v2 == v && i2 < i) || (v != v && v2 == v2)) v = v2, i = i2;
}

__global__ void argmax_kernel(const float* logits, int64_t n, int32_t* ids) {
  __shared__ float sv[kThreads / 32];
  __shared__ int64_t si[kThreads / 32];
  const int64_t r = blockIdx.x;
  const float* row = logits + r * n;
  float v = NAN;
  int64_t idx = n;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) better(v, idx, row[j], j);
  for (int off = 16; off > 0; off /= 2) better(v, idx, __shfl_xor_sync(0xffffffffu, v, off), __shfl_xor_sync(0xffffffffu, idx, off));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) sv[warp] = v, si[warp] = idx;
  __syncthreads();
  if (threadIdx.x == 0) {
    v = sv[0];
    idx = si[0];
    for (int w = 1; w < int(blockDim.x / 32); ++w) better(v, idx, sv[w], si[w]);
    ids[r] = int32_t(idx < n ? idx : 0);  // all NaN: 0, as the CPU's argmax
  }
}

}  // namespace

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int n, float eps, cudaStream_t stream,
             uint16_t* y_bf16) {
  if (rows < 0 || rows > INT32_MAX || n <= 0) fail("rmsnorm", "rows " + std::to_string(rows) + ", n " + std::to_string(n) + " out of range");
  if (rows == 0) return;
  rmsnorm_kernel<<<unsigned(rows), rmsnorm_threads(n), 0, stream>>>(x, w, y, y_bf16, n, eps);
  check_launch("rmsnorm");
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
  swiglu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gate, up, out_bf16, n);
  check_launch("swiglu");
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
  argmax_kernel<<<unsigned(rows), kThreads, 0, stream>>>(logits, n, ids);
  check_launch("argmax_rows");
}

}  // namespace oscar::cuda
