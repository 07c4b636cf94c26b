// Scalar reference of the uniform KV codec (layout in quant_codec.h / docs/kv-layout.md)
// and the dispatching entry points.
#include "oscar/kv/quant_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "oscar/core/error.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {
namespace {

bool is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

QuantGroupParams load_params(const QuantParams& p, const uint8_t* row, int g) {
  QuantGroupParams gp;
  std::memcpy(&gp, row + quant_code_bytes(p) + size_t(g) * 4, 4);  // little-endian host
  return gp;
}

}  // namespace

void quant_params_check(const QuantParams& p) {
  if (p.bits != 2 && p.bits != 4 && p.bits != 8) fail("kv quant: bits {} not supported (2, 4 or 8)", p.bits);
  if (!is_pow2(p.head_dim) || p.head_dim < 32 || p.head_dim > kQuantMaxHeadDim)
    fail("kv quant: head_dim {} not supported (a power of two in [32, {}])", p.head_dim, kQuantMaxHeadDim);
  if (p.group != 32 && p.group != 64 && p.group != 128 && p.group != 256)
    fail("kv quant: group size {} not supported (32, 64, 128 or 256)", p.group);
  if (p.group > p.head_dim || p.head_dim % p.group != 0)
    fail("kv quant: group size {} does not divide head_dim {}", p.group, p.head_dim);
  if (!(p.clip_ratio >= 0.0f && p.clip_ratio <= 1.0f))
    fail("kv quant: clip ratio {} outside [0, 1]", p.clip_ratio);
}

double bits_per_element(const QuantParams& p) { return p.bits + 32.0 / p.group; }

float clip_threshold(const float* x, int d, float ratio) {
  if (!(ratio > 0.0f) || ratio >= 1.0f) return INFINITY;
  const int idx = std::min(int(std::floor(double(ratio) * d)), d - 1);
  float a[kQuantMaxHeadDim];
  for (int i = 0; i < d; ++i) a[i] = std::fabs(x[i]);
  std::nth_element(a, a + idx, a + d);  // = sort(|x|)[idx]
  return a[idx];
}

QuantGroupParams uniform_group_params(float lo, float hi, int bits) {
  const float levels = float(quant_levels(bits));
  const float mag = std::max(std::fabs(lo), std::fabs(hi));
  const float range = std::max(hi - lo, mag * (1.0f / 256.0f));
  const float scale = std::clamp(range / levels, 0x1p-24f, 65504.0f);
  QuantGroupParams gp;
  gp.scale = f32_to_fp16(scale);
  // Round up, not to nearest: the grid [−z·s, (L−z)·s] then covers [lo, hi] (up to the
  // rounding of z), which matters for subnormal scales (< 2^-14) whose relative rounding
  // error times L would otherwise clamp the top values.
  if (fp16_to_f32(gp.scale) < scale) gp.scale.bits = uint16_t(gp.scale.bits + 1);
  const float s = fp16_to_f32(gp.scale);
  const float zero = std::clamp(0.0f - lo / s, -65504.0f, 65504.0f);  // 0 − … turns −0 into +0
  gp.zero = f32_to_fp16(zero);
  return gp;
}

void pack_codes(int bits, int n, const uint8_t* codes, uint8_t* packed) {
  const int k = 8 / bits, part = n / k;
  for (int j = 0; j < part; ++j) {
    unsigned b = 0;
    for (int s = 0; s < k; ++s) b |= unsigned(codes[j + s * part]) << (s * bits);
    packed[j] = uint8_t(b);
  }
}

void unpack_codes(int bits, int n, const uint8_t* packed, uint8_t* codes) {
  const int k = 8 / bits, part = n / k;
  const unsigned mask = (1u << bits) - 1;
  for (int j = 0; j < part; ++j)
    for (int s = 0; s < k; ++s) codes[j + s * part] = uint8_t((packed[j] >> (s * bits)) & mask);
}

void quantize_row_ref(const QuantParams& p, const float* x, uint8_t* out) {
  const int d = p.head_dim, G = p.group, L = quant_levels(p.bits);
  const float tau = clip_threshold(x, d, p.clip_ratio);
  const size_t group_bytes = size_t(G) * size_t(p.bits) / 8;
  float xc[256];
  uint8_t codes[256];
  for (int g = 0; g < d / G; ++g) {
    float lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < G; ++i) {
      xc[i] = std::clamp(x[g * G + i], -tau, tau);
      lo = std::min(lo, xc[i]);
      hi = std::max(hi, xc[i]);
    }
    const QuantGroupParams gp = uniform_group_params(lo, hi, p.bits);
    const float s = fp16_to_f32(gp.scale), z = fp16_to_f32(gp.zero);
    for (int i = 0; i < G; ++i) codes[i] = uniform_code(xc[i], s, z, L);
    pack_codes(p.bits, G, codes, out + g * group_bytes);
    std::memcpy(out + quant_code_bytes(p) + size_t(g) * 4, &gp, 4);
  }
}

void quantize_row(const QuantParams& p, const float* x, uint8_t* out) { quantize_row_ref(p, x, out); }

void dequantize_row_ref(const QuantParams& p, const uint8_t* in, float* x) {
  const int G = p.group;
  const size_t group_bytes = size_t(G) * size_t(p.bits) / 8;
  uint8_t codes[256];
  for (int g = 0; g < p.head_dim / G; ++g) {
    const QuantGroupParams gp = load_params(p, in, g);
    const float s = fp16_to_f32(gp.scale), z = fp16_to_f32(gp.zero);
    unpack_codes(p.bits, G, in + g * group_bytes, codes);
    for (int i = 0; i < G; ++i) x[g * G + i] = (float(codes[i]) - z) * s;
  }
}

float dot_row_ref(const QuantParams& p, const float* q, const uint8_t* row) {
  float x[kQuantMaxHeadDim];
  dequantize_row_ref(p, row, x);
  double acc = 0.0;
  for (int i = 0; i < p.head_dim; ++i) acc += double(q[i]) * double(x[i]);
  return float(acc);
}

void axpy_row_ref(const QuantParams& p, float a, const uint8_t* row, float* acc) {
  float x[kQuantMaxHeadDim];
  dequantize_row_ref(p, row, x);
  for (int i = 0; i < p.head_dim; ++i) acc[i] += a * x[i];
}

void dot_rows_ref(const QuantParams& p, const float* q, const uint8_t* rows, size_t row_stride, int64_t n_rows,
                  float* out) {
  for (int64_t r = 0; r < n_rows; ++r) out[r] = dot_row_ref(p, q, rows + r * row_stride);
}

void axpy_rows_ref(const QuantParams& p, const float* a, const uint8_t* rows, size_t row_stride, int64_t n_rows,
                   float* acc) {
  for (int64_t r = 0; r < n_rows; ++r) axpy_row_ref(p, a[r], rows + r * row_stride, acc);
}

float dot_codes_ref(int bits, int n, const float* q, const uint8_t* packed) {
  uint8_t codes[kQuantMaxHeadDim];
  unpack_codes(bits, n, packed, codes);
  double acc = 0.0;
  for (int i = 0; i < n; ++i) acc += double(q[i]) * codes[i];
  return float(acc);
}

// ---- dispatch ----------------------------------------------------------------------------

namespace {
// The AVX2 kernels read the packed codes of a group 8 bytes at a time: a group's part
// (G·bits/8 bytes) must be a multiple of 8, so INT2 needs G ≥ 32 (G = 16 read past
// its group, into the next row's scales).
bool avx2_fits(int bits, int n) { return use_avx2() && (n * bits / 8) % 8 == 0; }
bool avx2_fits(const QuantParams& p) { return avx2_fits(p.bits, p.group); }
}  // namespace

void dequantize_row(const QuantParams& p, const uint8_t* in, float* x) {
  if (avx2_fits(p)) return dequantize_row_avx2(p, in, x);
  dequantize_row_ref(p, in, x);
}

float dot_row(const QuantParams& p, const float* q, const uint8_t* row) {
  return avx2_fits(p) ? dot_row_avx2(p, q, row) : dot_row_ref(p, q, row);
}

void axpy_row(const QuantParams& p, float a, const uint8_t* row, float* acc) {
  if (avx2_fits(p)) return axpy_row_avx2(p, a, row, acc);
  axpy_row_ref(p, a, row, acc);
}

void dot_rows(const QuantParams& p, const float* q, const uint8_t* rows, size_t row_stride, int64_t n_rows,
              float* out) {
  if (avx2_fits(p)) return dot_rows_avx2(p, q, rows, row_stride, n_rows, out);
  dot_rows_ref(p, q, rows, row_stride, n_rows, out);
}

void axpy_rows(const QuantParams& p, const float* a, const uint8_t* rows, size_t row_stride, int64_t n_rows,
               float* acc) {
  if (avx2_fits(p)) return axpy_rows_avx2(p, a, rows, row_stride, n_rows, acc);
  axpy_rows_ref(p, a, rows, row_stride, n_rows, acc);
}

float dot_codes(int bits, int n, const float* q, const uint8_t* packed) {
  return avx2_fits(bits, n) ? dot_codes_avx2(bits, n, q, packed) : dot_codes_ref(bits, n, q, packed);
}

}  // namespace oscar
