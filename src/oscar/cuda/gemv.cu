// Few-row BF16 products (gemv.h).
#include "oscar/cuda/gemv.h"

#include <cuda_bf16.h>

#include <string>

#include "oscar/cuda/device_primitives.cuh"
#include "oscar/cuda/host_checks.h"
#include "oscar/cuda/launch.h"

namespace oscar::cuda {
namespace {

using detail::allow_dependent_launch;
using detail::wait_for_prior_grid;

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

// Piece k (8 values) of x's row r as BF16: loaded as such, or f32 rounded to BF16 on the
// way (what cast_to_bf16 then a BF16 product would use).
template <class X>
__device__ __forceinline__ uint4 x_piece(const X* x, int64_t r, int n_in, int k) {
  if constexpr (sizeof(X) == 2) {
    return __ldg(reinterpret_cast<const uint4*>(x + size_t(r) * size_t(n_in)) + k);
  } else {
    const float4* p = reinterpret_cast<const float4*>(x + size_t(r) * size_t(n_in)) + 2 * k;
    const float4 a = __ldg(p), b = __ldg(p + 1);
    return make_uint4(detail::pack_bf16(a.x, a.y), detail::pack_bf16(a.z, a.w), detail::pack_bf16(b.x, b.y),
                      detail::pack_bf16(b.z, b.w));
  }
}

// Launched as a programmatic dependent (launch.h): the CTAs are scheduled while the kernel
// before drains and wait for it here. Each lane's first round of W is loaded into registers
// before the wait: B = 1 step, H200, INT2-OSCAR 4.86 -> 4.69 ms at 8K (0.75 -> 0.77 of copy
// bandwidth), BF16 5.17 -> 5.03. Asking each row's first 4 KB into L2 before the wait
// (cp.async.bulk.prefetch.L2) had made it 6 % slower (5.05 -> 5.35 ms), and streaming W_o
// into L2 during attention 80 % slower: the bulk prefetches are issued slowly and hold the
// issuing warps.
template <int kM, class X>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const X* __restrict__ x, const uint16_t* __restrict__ w,
                                                           const float* __restrict__ bias, float* __restrict__ y,
                                                           int n_in, int n_out, bool accumulate) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + warp;
  const uint4* wr = reinterpret_cast<const uint4*>(w + size_t(row) * size_t(n_in));
  const int n8 = n_in / 8;  // 16-byte pieces per row
  int k = lane;
  // The first round of W (a weight: the kernel before does not write it) is loaded before
  // the wait, so that it arrives while that kernel drains.
  const bool first_round = row < n_out && k + 32 * (kUnroll - 1) < n8;
  uint4 w0[kUnroll];
  if (first_round) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) w0[u] = __ldg(wr + k + 32 * u);
  }
  wait_for_prior_grid();
  allow_dependent_launch();
  if (row >= n_out) return;
  float acc[kM];
#pragma unroll
  for (int r = 0; r < kM; ++r) acc[r] = 0.0f;
  if (first_round) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < kM; ++r) fma8(acc[r], w0[u], x_piece(x, r, n_in, k + 32 * u));
    k += 32 * kUnroll;
  }
  // kUnroll pieces per lane per round, issued before any is used.
  for (; k + 32 * (kUnroll - 1) < n8; k += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldg(wr + k + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < kM; ++r) fma8(acc[r], wv[u], x_piece(x, r, n_in, k + 32 * u));
  }
  for (; k < n8; k += 32) {
    const uint4 wv = __ldg(wr + k);
#pragma unroll
    for (int r = 0; r < kM; ++r) fma8(acc[r], wv, x_piece(x, r, n_in, k));
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

template <class X>
void launch(const char* what, const X* x, const uint16_t* w, const float* bias, float* y, int64_t m, int n_in,
            int n_out, bool accumulate, cudaStream_t stream) {
  if (!gemv_supported(m, n_in) || n_out <= 0)
    detail::fail(what, "unsupported shape: m " + std::to_string(m) + ", n_in " + std::to_string(n_in) + " (1.." +
                           std::to_string(kGemvMaxRows) + " rows, n_in a multiple of 8), n_out " +
                           std::to_string(n_out));
  if (!detail::aligned16(x) || !detail::aligned16(w)) detail::fail(what, "x and W must be 16-byte aligned");
  const dim3 grid(unsigned((n_out + kWarps - 1) / kWarps)), block(kWarps * 32);
  auto go = [&](auto kernel) { detail::launch_dependent(kernel, grid, block, 0, stream, what, x, w, bias, y, n_in, n_out, accumulate); };
  switch (m) {
    case 1: go(gemv_kernel<1, X>); break;
    case 2: go(gemv_kernel<2, X>); break;
    case 3: go(gemv_kernel<3, X>); break;
    default: go(gemv_kernel<4, X>); break;
  }
}

}  // namespace

bool gemv_supported(int64_t m, int n_in) { return m >= 1 && m <= kGemvMaxRows && n_in > 0 && n_in % 8 == 0; }

void gemv_bf16(const uint16_t* x, const uint16_t* w, const float* bias, float* y, int64_t m, int n_in, int n_out,
               bool accumulate, cudaStream_t stream) {
  launch("gemv_bf16", x, w, bias, y, m, n_in, n_out, accumulate, stream);
}

void gemv_f32_input(const float* x, const uint16_t* w, const float* bias, float* y, int64_t m, int n_in, int n_out,
                    bool accumulate, cudaStream_t stream) {
  launch("gemv_f32_input", x, w, bias, y, m, n_in, n_out, accumulate, stream);
}

}  // namespace oscar::cuda
