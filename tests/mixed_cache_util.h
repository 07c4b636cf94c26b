// Helpers for the tests of the mixed (full-precision + quantized history) KV cache:
// the expected contents of each segment, computed from the codecs directly (never
// through the cache), and random orthogonal matrices for the rotation tests.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "oscar/core/dtype.h"
#include "oscar/kv/history_format.h"
#include "oscar/kv/kivi_codec.h"
#include "oscar/kv/kv_spec.h"
#include "oscar/kv/lloyd_max.h"
#include "oscar/kv/quant_codec.h"
#include "oscar/rotation/rotation_set.h"

namespace oscar::test {

inline float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// What a full-precision row of `spec` holds after a write of x.
inline float fp_stored(const KvSpec& spec, float x) { return spec.dtype == KvDtype::bf16 ? bf16_round(x) : x; }

// r(t) of kv_spec.h, written out independently: [sink 0..S) ‖ history [S..r) ‖ recent [r..t).
inline int64_t expected_history_end(const KvSpec& spec, int64_t t) {
  if (!spec.quantized() || t <= spec.sink) return std::min<int64_t>(t, spec.sink);
  const int64_t T = spec.quant == KvQuant::kivi2 ? spec.kivi_tokens : 1;
  const int64_t excess = t - spec.sink - spec.recent;
  return excess <= 0 ? spec.sink : spec.sink + (excess / T) * T;
}

// Storage bits per element of a history side, by hand: codes + fp16 (scale, zero) or
// (μ, σ) per group of G dims; KIVI keys one fp16 pair per channel per T tokens.
inline double expected_history_bits(const HistoryFormat& f) {
  if (f.quant == KvQuant::bf16_raw) return 16.0;  // raw bf16 rows, no scale
  const int bits = f.quant == KvQuant::int8 ? 8 : f.quant == KvQuant::int4 ? 4 : 2;
  if (f.per_channel) return bits + 32.0 / f.block_tokens;
  return bits + 32.0 / f.group;
}

inline QuantParams codec_params(const HistoryFormat& f) {
  QuantParams p;
  p.bits = f.quant == KvQuant::int8 ? 8 : f.quant == KvQuant::int4 ? 4 : 2;
  p.head_dim = f.head_dim;
  p.group = f.group;
  p.clip_ratio = f.clip;
  return p;
}

// Quantize → dequantize one row with the codec a per-token format names.
inline void codec_round_trip_row(const HistoryFormat& f, const float* x, float* out) {
  if (f.quant == KvQuant::bf16_raw) {  // a bf16 layer of a per-layer mixed cache: bf16 rounding only
    for (int c = 0; c < f.head_dim; ++c) out[c] = bf16_round(x[c]);
    return;
  }
  const QuantParams p = codec_params(f);
  std::vector<uint8_t> buf(quant_row_bytes(p));
  switch (f.quant) {
    case KvQuant::int2_lloyd_max:
      quantize_row_lloyd_max_approx(p, x, buf.data());
      dequantize_row_ref(p, buf.data(), out);
      return;
    case KvQuant::int2_lloyd_max_exact:
      quantize_row_lloyd_max_exact(p, x, buf.data());
      dequantize_row_lloyd_max_exact_ref(p, buf.data(), out);
      return;
    default:
      quantize_row_ref(p, x, buf.data());
      dequantize_row_ref(p, buf.data(), out);
  }
}

// Quantize → dequantize a KIVI key block: rows [T, d] → out [T, d].
inline void codec_round_trip_kivi_keys(const HistoryFormat& f, const float* rows, float* out) {
  KiviKeyParams p;
  p.bits = 2;
  p.head_dim = f.head_dim;
  p.block_tokens = f.block_tokens;
  std::vector<uint8_t> buf(kivi_key_block_bytes(p));
  kivi_quantize_key_block(p, rows, buf.data());
  kivi_dequantize_key_block(p, buf.data(), out);
}

// A random d×d orthogonal matrix (row-major): Gram–Schmidt in double on a Gaussian matrix.
inline std::vector<float> random_orthogonal(int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> m(static_cast<size_t>(d) * static_cast<size_t>(d));
  for (double& x : m) x = g(rng);
  for (int i = 0; i < d; ++i) {
    double* ri = m.data() + static_cast<size_t>(i) * static_cast<size_t>(d);
    for (int pass = 0; pass < 2; ++pass) {  // twice: classical Gram–Schmidt loses orthogonality once
      for (int j = 0; j < i; ++j) {
        const double* rj = m.data() + static_cast<size_t>(j) * static_cast<size_t>(d);
        double dot = 0.0;
        for (int c = 0; c < d; ++c) dot += ri[c] * rj[c];
        for (int c = 0; c < d; ++c) ri[c] -= dot * rj[c];
      }
    }
    double n2 = 0.0;
    for (int c = 0; c < d; ++c) n2 += ri[c] * ri[c];
    const double inv = 1.0 / std::sqrt(n2);
    for (int c = 0; c < d; ++c) ri[c] *= inv;
  }
  return std::vector<float>(m.begin(), m.end());
}

// y [n, d] = x [n, d] · R [d, d], accumulated in double.
inline std::vector<float> rotate_rows_f64(const std::vector<float>& x, const std::vector<float>& R, int d) {
  std::vector<float> y(x.size());
  const size_t n = x.size() / static_cast<size_t>(d);
  for (size_t r = 0; r < n; ++r)
    for (int j = 0; j < d; ++j) {
      double acc = 0.0;
      for (int i = 0; i < d; ++i) acc += double(x[r * size_t(d) + size_t(i)]) * R[size_t(i) * size_t(d) + size_t(j)];
      y[r * size_t(d) + size_t(j)] = float(acc);
    }
  return y;
}

// max |x − ref| / max |ref|: the relative error of a whole output vector.
inline double max_rel_error(const float* x, const float* ref, size_t n) {
  double err = 0.0, mag = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double e = std::abs(double(x[i]) - double(ref[i]));
    err = std::isnan(e) ? INFINITY : std::max(err, e);
    mag = std::max(mag, std::abs(double(ref[i])));
  }
  return mag > 0.0 ? err / mag : err;
}

// n_layers random orthogonal K and V rotations of size d (seeds k_seed + l and v_seed + l),
// group d, the reference's clips (K 0.96, V 0.92); validated.
inline RotationSet random_rotation_set(int n_layers, int d, uint64_t k_seed, uint64_t v_seed) {
  RotationSet rs;
  rs.head_dim = d;
  rs.group_size = d;
  for (int l = 0; l < n_layers; ++l) {
    LayerRotation lr;
    lr.layer = l;
    lr.k_rotation = random_orthogonal(d, k_seed + uint64_t(l));
    lr.v_rotation = random_orthogonal(d, v_seed + uint64_t(l));
    lr.k_clip = 0.96f;
    lr.v_clip = 0.92f;
    rs.layers.push_back(std::move(lr));
  }
  rs.validate();
  return rs;
}

}  // namespace oscar::test
