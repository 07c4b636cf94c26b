// Lloyd-Max INT2 variants of the KV codec (spec section 3), per group of G dims after the
// row's quantile clipping. Both use the uniform codec's row layout (codes, then one fp16
// pair per group); p.bits must be 2.
//
// approx — the reference's flag: μ, σ (population) of the clipped group; code = number of
//   thresholds {−t, 0, +t} (t = 0.98107) strictly below z = (x − μ)/σ; dequantized by the
//   uniform grid of 4 equally spaced levels spanning [μ − a, μ + a], a = 1.50956·1.16·σ,
//   i.e. levels μ + a·{−1, −1/3, +1/3, +1}: scale = 2a/3, zero = (a − μ)/scale (stored
//   through uniform_group_params(μ − a, μ + a, 2)). Rows are read by the uniform kernels
//   (dequantize_row, dot_row, axpy_row) unchanged.
// exact — the Lloyd-Max 4-level Gaussian quantizer: the pair is {fp16 μ, fp16 σ} and
//   x̂ = μ + σ·c[code], c = {−1.5104, −0.4528, +0.4528, +1.5104}; the code is the nearest
//   level for the fp16 μ, σ (midpoints μ + σ·{−0.9816, 0, +0.9816}). Needs its own kernels.
#pragma once
#include <cstdint>

#include "oscar/kv/quant_codec.h"

namespace oscar {

inline constexpr float kLloydMaxApproxThreshold = 0.98107f;
inline constexpr float kLloydMaxApproxHalfSpan = 1.50956f * 1.16f;  // a/σ
inline constexpr float kLloydMaxCentroids[4] = {-1.5104f, -0.4528f, 0.4528f, 1.5104f};
inline constexpr float kLloydMaxThreshold = 0.9816f;  // midpoint of the outer and inner centroids

// Mean and population standard deviation of n values (double accumulation).
void group_mean_std(const float* x, int n, float* mean, float* std);

// Writes a row in the uniform format (decode with dequantize_row / dot_row / axpy_row).
void quantize_row_lloyd_max_approx(const QuantParams& p, const float* x, uint8_t* out);

void quantize_row_lloyd_max_exact(const QuantParams& p, const float* x, uint8_t* out);
void dequantize_row_lloyd_max_exact_ref(const QuantParams& p, const uint8_t* in, float* x);
void dequantize_row_lloyd_max_exact_avx2(const QuantParams& p, const uint8_t* in, float* x);  // bit-exact
void dequantize_row_lloyd_max_exact(const QuantParams& p, const uint8_t* in, float* x);
float dot_row_lloyd_max_exact_ref(const QuantParams& p, const float* q, const uint8_t* row);
float dot_row_lloyd_max_exact_avx2(const QuantParams& p, const float* q, const uint8_t* row);
float dot_row_lloyd_max_exact(const QuantParams& p, const float* q, const uint8_t* row);
void axpy_row_lloyd_max_exact_ref(const QuantParams& p, float a, const uint8_t* row, float* acc);
void axpy_row_lloyd_max_exact_avx2(const QuantParams& p, float a, const uint8_t* row, float* acc);
void axpy_row_lloyd_max_exact(const QuantParams& p, float a, const uint8_t* row, float* acc);

// The 4 dequantized levels of group g of an exact row, as the kernels compute them
// (level k = μ + σ·c[k] in f32 from the stored fp16 pair).
void lloyd_max_exact_levels(const QuantParams& p, const uint8_t* row, int g, float levels[4]);

}  // namespace oscar
