// Few-row BF16 products (gemv.h).
#include "oscar/cuda/gemv.h"

#include <cuda_bf16.h>

#include <string>

#include "oscar/cuda/host_checks.h"

namespace oscar::cuda {
namespace {

constexpr int kWarps = 8;    // output rows per CTA
constexpr int kUnroll = 4;   // 16-byte loads in flight per lane

__device__ __forceinline__ void fma8(float& acc, const uint4& w, const uint4& x) {
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(a[i]), fb = __bfloat1622float2(b[i]);
    acc = fmaf(fa.x, fb.x, acc);
    acc = fmaf(fa.y, fb.y, acc);
  }
}

template <int kM>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                                                           const float* __restrict__ bias, float* __restrict__ y,
                                                           int n_in, int n_out, bool accumulate) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + warp;
  if (row >= n_out) return;
  const uint4* wr = reinterpret_cast<const uint4*>(w + size_t(row) * size_t(n_in));
  const int n8 = n_in / 8;  // 16-byte pieces per row
  float acc[kM];
#pragma unroll
  for (int r = 0; r < kM; ++r) acc[r] = 0.0f;
  int k = lane;
  // kUnroll pieces per lane per round, issued before any is used.
  for (; k + 32 * (kUnroll - 1) < n8; k += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldg(wr + k + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < kM; ++r)
        fma8(acc[r], wv[u], __ldg(reinterpret_cast<const uint4*>(x + size_t(r) * size_t(n_in)) + k + 32 * u));
  }
  for (; k < n8; k += 32) {
    const uint4 wv = __ldg(wr + k);
#pragma unroll
    for (int r = 0; r < kM; ++r) fma8(acc[r], wv, __ldg(reinterpret_cast<const uint4*>(x + size_t(r) * size_t(n_in)) + k));
  }
#pragma unroll
  for (int r = 0; r < kM; ++r)
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
  if (lane == 0) {
    const float b = bias ? bias[row] : 0.0f;
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      float* out = y + size_t(r) * size_t(n_out) + row;
      *out = (accumulate ? *out : 0.0f) + acc[r] + b;
    }
  }
}

}  // namespace

bool gemv_supported(int64_t m, int n_in) { return m >= 1 && m <= kGemvMaxRows && n_in > 0 && n_in % 8 == 0; }

void gemv_bf16(const uint16_t* x, const uint16_t* w, const float* bias, float* y, int64_t m, int n_in, int n_out,
               bool accumulate, cudaStream_t stream) {
  if (!gemv_supported(m, n_in) || n_out <= 0)
    detail::fail("gemv_bf16", "unsupported shape: m " + std::to_string(m) + ", n_in " + std::to_string(n_in) +
                                  " (1.." + std::to_string(kGemvMaxRows) + " rows, n_in a multiple of 8), n_out " +
                                  std::to_string(n_out));
  if (!detail::aligned16(x) || !detail::aligned16(w)) detail::fail("gemv_bf16", "x and W must be 16-byte aligned");
  const unsigned blocks = unsigned((n_out + kWarps - 1) / kWarps);
  switch (m) {
    case 1: gemv_kernel<1><<<blocks, kWarps * 32, 0, stream>>>(x, w, bias, y, n_in, n_out, accumulate); break;
    case 2: gemv_kernel<2><<<blocks, kWarps * 32, 0, stream>>>(x, w, bias, y, n_in, n_out, accumulate); break;
    case 3: gemv_kernel<3><<<blocks, kWarps * 32, 0, stream>>>(x, w, bias, y, n_in, n_out, accumulate); break;
    default: gemv_kernel<4><<<blocks, kWarps * 32, 0, stream>>>(x, w, bias, y, n_in, n_out, accumulate); break;
  }
  detail::check_launch("gemv_bf16");
}

}  // namespace oscar::cuda
