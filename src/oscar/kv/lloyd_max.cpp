// Lloyd-Max INT2 encoders (approx and exact) and the exact variant's reference kernels.
#include "oscar/kv/lloyd_max.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "oscar/core/error.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {
namespace {

void check_int2(const QuantParams& p) {
  quant_params_check(p);
  if (p.bits != 2) fail("kv quant: the Lloyd-Max codec is 4-level (bits 2), got bits {}", p.bits);
}

// Clipped copy of group g of x.
void clipped_group(const QuantParams& p, const float* x, float tau, int g, float* xc) {
  for (int i = 0; i < p.group; ++i) xc[i] = std::clamp(x[g * p.group + i], -tau, tau);
}

void store_pair(const QuantParams& p, uint8_t* row, int g, fp16 a, fp16 b) {
  uint8_t* dst = row + quant_code_bytes(p) + size_t(g) * 4;
  std::memcpy(dst, &a.bits, 2);
  std::memcpy(dst + 2, &b.bits, 2);
}

}  // namespace

void group_mean_std(const float* x, int n, float* mean, float* std) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += x[i];
  const double mu = s / n;
  double v = 0.0;
  for (int i = 0; i < n; ++i) v += (x[i] - mu) * (x[i] - mu);
  *mean = float(mu);
  *std = float(std::sqrt(v / n));
}

void quantize_row_lloyd_max_approx(const QuantParams& p, const float* x, uint8_t* out) {
  check_int2(p);
  const int G = p.group;
  const float tau = clip_threshold(x, p.head_dim, p.clip_ratio);
  float xc[256];
  uint8_t codes[256];
  for (int g = 0; g < p.head_dim / G; ++g) {
    clipped_group(p, x, tau, g, xc);
    float mu, sigma;
    group_mean_std(xc, G, &mu, &sigma);
    const float a = kLloydMaxApproxHalfSpan * sigma;
    const QuantGroupParams gp = uniform_group_params(mu - a, mu + a, 2);
    const float t = kLloydMaxApproxThreshold;
    for (int i = 0; i < G; ++i) {
      // σ = 0 (a constant group) counts every z as 0, i.e. code 1.
      const float z = sigma > 0.0f ? (xc[i] - mu) / sigma : 0.0f;
      codes[i] = uint8_t(int(z > -t) + int(z > 0.0f) + int(z > t));
    }
    pack_codes(2, G, codes, out + size_t(g) * G / 4);
    store_pair(p, out, g, gp.scale, gp.zero);
  }
}

void quantize_row_lloyd_max_exact(const QuantParams& p, const float* x, uint8_t* out) {
  check_int2(p);
  const int G = p.group;
  const float tau = clip_threshold(x, p.head_dim, p.clip_ratio);
  float xc[256];
  uint8_t codes[256];
  for (int g = 0; g < p.head_dim / G; ++g) {
    clipped_group(p, x, tau, g, xc);
    float mu, sigma;
    group_mean_std(xc, G, &mu, &sigma);
    const fp16 mu_h = f32_to_fp16(mu), sigma_h = f32_to_fp16(sigma);
    store_pair(p, out, g, mu_h, sigma_h);
    // Nearest level for the stored (fp16) μ, σ.
    const float m = fp16_to_f32(mu_h), s = fp16_to_f32(sigma_h);
    const float lo = m - s * kLloydMaxThreshold, hi = m + s * kLloydMaxThreshold;
    for (int i = 0; i < G; ++i) codes[i] = uint8_t(int(xc[i] > lo) + int(xc[i] > m) + int(xc[i] > hi));
    pack_codes(2, G, codes, out + size_t(g) * G / 4);
  }
}

void lloyd_max_exact_levels(const QuantParams& p, const uint8_t* row, int g, float levels[4]) {
  fp16 mu, sigma;
  const uint8_t* src = row + quant_code_bytes(p) + size_t(g) * 4;
  std::memcpy(&mu.bits, src, 2);
  std::memcpy(&sigma.bits, src + 2, 2);
  const float m = fp16_to_f32(mu), s = fp16_to_f32(sigma);
  for (int k = 0; k < 4; ++k) levels[k] = m + s * kLloydMaxCentroids[k];
}

void dequantize_row_lloyd_max_exact_ref(const QuantParams& p, const uint8_t* in, float* x) {
  const int G = p.group;
  uint8_t codes[256];
  for (int g = 0; g < p.head_dim / G; ++g) {
    float lev[4];
    lloyd_max_exact_levels(p, in, g, lev);
    unpack_codes(2, G, in + size_t(g) * G / 4, codes);
    for (int i = 0; i < G; ++i) x[g * G + i] = lev[codes[i]];
  }
}

float dot_row_lloyd_max_exact_ref(const QuantParams& p, const float* q, const uint8_t* row) {
  float x[kQuantMaxHeadDim];
  dequantize_row_lloyd_max_exact_ref(p, row, x);
  double acc = 0.0;
  for (int i = 0; i < p.head_dim; ++i) acc += double(q[i]) * double(x[i]);
  return float(acc);
}

void axpy_row_lloyd_max_exact_ref(const QuantParams& p, float a, const uint8_t* row, float* acc) {
  float x[kQuantMaxHeadDim];
  dequantize_row_lloyd_max_exact_ref(p, row, x);
  for (int i = 0; i < p.head_dim; ++i) acc[i] += a * x[i];
}

void dequantize_row_lloyd_max_exact(const QuantParams& p, const uint8_t* in, float* x) {
  if (use_avx2()) return dequantize_row_lloyd_max_exact_avx2(p, in, x);
  dequantize_row_lloyd_max_exact_ref(p, in, x);
}

float dot_row_lloyd_max_exact(const QuantParams& p, const float* q, const uint8_t* row) {
  return use_avx2() ? dot_row_lloyd_max_exact_avx2(p, q, row) : dot_row_lloyd_max_exact_ref(p, q, row);
}

void axpy_row_lloyd_max_exact(const QuantParams& p, float a, const uint8_t* row, float* acc) {
  if (use_avx2()) return axpy_row_lloyd_max_exact_avx2(p, a, row, acc);
  axpy_row_lloyd_max_exact_ref(p, a, row, acc);
}

}  // namespace oscar
