// The few-row BF16 product (gemv.h) and Linear's routing to it, against a double reference
// on fresh random inputs: m = 1 … 4 (and 5, cuBLAS), n_in a multiple of 8 that is not one of
// 256 (a partial last round), n_out odd and past a CTA's rows; bias, the residual add
// (accumulate), and outputs poisoned (NaN) beforehand; x in f32 (gemv_f32_input: each value
// rounded to BF16); and x written by a slow kernel just before the product, which is
// launched as a programmatic dependent and must wait for it. Tolerance per element: the
// f32 sum's rounding, 1e-5 of Σ|w·x| (the products of BF16 inputs are exact in f32).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>

#include "cuda_test_util.h"
#include "oscar/cuda/gemv.h"
#include "oscar/cuda/linear.h"

namespace {

using namespace oscar_cuda_test;

uint16_t bf16_bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
double bf16_value(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Spins for about `ns` nanoseconds, then copies n bytes: the input of the next kernel,
// written late.
__global__ void late_copy(const uint8_t* src, uint8_t* dst, size_t n, long long ns) {
  const long long t0 = clock64();
  while (clock64() - t0 < ns * 2) {
  }
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) dst[i] = src[i];
}

enum class XKind { bf16, f32, bf16_late, f32_late };

void test_gemv(int64_t m, int n_in, int n_out, bool bias, bool accumulate, bool through_linear, uint32_t seed,
               XKind kind = XKind::bf16) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const bool f32 = kind == XKind::f32 || kind == XKind::f32_late;
  const bool late = kind == XKind::bf16_late || kind == XKind::f32_late;
  std::vector<uint16_t> x(size_t(m) * n_in), w(size_t(n_out) * n_in);
  std::vector<float> x32(f32 ? x.size() : 0);
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = g(rng);
    if (f32) x32[i] = v;
    x[i] = bf16_bits(v);  // what the product uses either way
  }
  for (auto& v : w) v = bf16_bits(g(rng) / std::sqrt(float(n_in)));
  std::vector<float> b(static_cast<size_t>(n_out)), y0(static_cast<size_t>(m * n_out));
  for (auto& v : b) v = g(rng);
  for (auto& v : y0) v = accumulate ? g(rng) : NAN;
  std::vector<double> want(y0.size()), mag(y0.size());
  for (int64_t r = 0; r < m; ++r)
    for (int o = 0; o < n_out; ++o) {
      double acc = 0.0, a = 0.0;
      for (int k = 0; k < n_in; ++k) {
        const double p = bf16_value(w[size_t(o) * n_in + k]) * bf16_value(x[size_t(r) * n_in + k]);
        acc += p, a += std::fabs(p);
      }
      const size_t i = size_t(r) * n_out + o;
      want[i] = acc + (bias ? b[size_t(o)] : 0.0) + (accumulate ? y0[i] : 0.0);
      mag[i] = a + 1.0;
    }
  DeviceBuffer dx = f32 ? DeviceBuffer::from(x32) : DeviceBuffer::from(x), dw = DeviceBuffer::from(w),
               db = DeviceBuffer::from(b), dy = DeviceBuffer::from(y0);
  const size_t x_bytes = f32 ? x32.size() * 4 : x.size() * 2;
  DeviceBuffer staged = f32 ? DeviceBuffer::from(x32) : DeviceBuffer::from(x);
  if (late) {  // x is NaN until the copy, 50 µs after the spin starts
    CHECK_CUDA(cudaMemset(dx.as<uint8_t>(), 0xff, x_bytes));
    CHECK_CUDA(cudaDeviceSynchronize());
    late_copy<<<4, 256>>>(staged.as<uint8_t>(), dx.as<uint8_t>(), x_bytes, 50000);
    CHECK_CUDA(cudaGetLastError());
  }
  if (f32 && through_linear) {
    cudaStream_t s = nullptr;
    oscar::cuda::Linear lin(s, size_t(m) * n_in);
    lin.linear(dx.as<float>(), dw.as<uint16_t>(), bias ? db.as<float>() : nullptr, dy.as<float>(), m, n_in, n_out,
               accumulate);
  } else if (f32) {
    oscar::cuda::gemv_f32_input(dx.as<float>(), dw.as<uint16_t>(), bias ? db.as<float>() : nullptr, dy.as<float>(), m,
                                n_in, n_out, accumulate, nullptr);
  } else if (through_linear) {
    cudaStream_t s = nullptr;
    oscar::cuda::Linear lin(s, size_t(m) * n_in);
    lin.linear_bf16(dx.as<uint16_t>(), dw.as<uint16_t>(), bias ? db.as<float>() : nullptr, dy.as<float>(), m, n_in, n_out,
                    accumulate);
  } else {
    oscar::cuda::gemv_bf16(dx.as<uint16_t>(), dw.as<uint16_t>(), bias ? db.as<float>() : nullptr, dy.as<float>(), m, n_in,
                           n_out, accumulate, nullptr);
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = download<float>(dy, y0.size());
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::isfinite(got[i]) ? std::max(worst, std::fabs(got[i] - want[i]) / (1e-5 * mag[i])) : INFINITY;
  const std::string what = f32 ? (through_linear ? "Linear::linear (f32 x)" : "gemv_f32_input")
                              : (through_linear ? "Linear::linear_bf16" : "gemv_bf16");
  report(worst <= 1.0, what + (late ? " (x written late)" : "") + " m " + std::to_string(m) +
                           " n_in " + std::to_string(n_in) + " n_out " + std::to_string(n_out) + (bias ? " +bias" : "") +
                           (accumulate ? " +=" : "") + ": worst/tol " + std::to_string(worst));
}

}  // namespace

void oscar_cuda_test::run_gemv_tests(uint32_t seed) {
  uint32_t s = seed;
  for (int64_t m = 1; m <= 4; ++m) {
    test_gemv(m, 8, 1, false, false, false, ++s);
    test_gemv(m, 520, 97, true, false, false, ++s);     // a partial last round; n_out past 12 CTAs
    test_gemv(m, 4096, 1031, false, true, false, ++s);  // the residual add
    test_gemv(m, 2056, 64, true, true, true, ++s);       // through Linear (the gemv path)
  }
  for (int64_t m = 1; m <= 4; ++m) {
    test_gemv(m, 520, 97, true, false, false, ++s, XKind::f32);
    test_gemv(m, 4096, 1031, false, true, true, ++s, XKind::f32);  // Linear::linear, f32 x: no cast kernel
    test_gemv(m, 4096, 2051, true, true, false, ++s, XKind::bf16_late);
    test_gemv(m, 12288, 517, false, true, false, ++s, XKind::f32_late);
  }
  test_gemv(5, 520, 97, true, true, true, ++s);  // five rows: Linear takes cuBLAS
  test_gemv(5, 520, 97, true, true, true, ++s, XKind::f32);
  const std::string refusal = error_of([] { oscar::cuda::gemv_bf16(nullptr, nullptr, nullptr, nullptr, 5, 64, 8, false, nullptr); });
  report(refusal.find("unsupported shape") != std::string::npos, "gemv_bf16 refuses 5 rows: \"" + refusal + "\"");
}
