// KeyBias::row_avx2: a_t rows, eight columns per accumulator. KeyBias::scores_avx2: sixteen keys per step from the transposed cs table, a tile of up to
// six heads per pass so that each table load feeds six FMAs.
#include <immintrin.h>

#include <algorithm>

#include "oscar/attention/key_bias.h"
#include "oscar/core/error.h"

namespace oscar {
namespace {

// out_h[k] = Σ_r c_h[r]·table[r·kBlock + j + k] for k < lanes ≤ 16, H ≤ 6 heads: 2H
// independent FMA chains (FMA latency 4, two per cycle: fewer chains leave the units idle).
// The heads' coefficients are rows of c (stride d); out rows have stride n. Every loop over
// the heads is unrolled by pragma: at -O3 GCC 12 otherwise kept acc in memory and stored all
// 2H accumulators on every step (3× slower).
template <int H>
void score_lanes(const float* c, const float* table, int d, int j, int lanes, float* out, int64_t n) {
  __m256 acc[2 * H];
#pragma GCC unroll 16
  for (int h = 0; h < 2 * H; ++h) acc[h] = _mm256_setzero_ps();
  const float* col = table + j;
  for (int r = 0; r < d; ++r, col += KeyBias::kBlock) {
    const __m256 cs_lo = _mm256_loadu_ps(col);
    const __m256 cs_hi = _mm256_loadu_ps(col + 8);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      const __m256 ch = _mm256_broadcast_ss(c + h * d + r);
      acc[2 * h] = _mm256_fmadd_ps(ch, cs_lo, acc[2 * h]);
      acc[2 * h + 1] = _mm256_fmadd_ps(ch, cs_hi, acc[2 * h + 1]);
    }
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i keep_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), lane);
  const __m256i keep_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes - 8), lane);
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
    _mm256_maskstore_ps(out + h * n, keep_lo, acc[2 * h]);
    _mm256_maskstore_ps(out + h * n + 8, keep_hi, acc[2 * h + 1]);
  }
}

}  // namespace

void KeyBias::row_avx2(const float* cs, float* row) const {
  const int64_t kvd = int64_t(n_kv_heads_) * d_;  // a multiple of 8 (d is)
  for (int64_t e0 = 0; e0 < kvd; e0 += 64) {  // 8 accumulators of 8 columns, r innermost
    const int v = int(std::min<int64_t>(64, kvd - e0) / 8);
    __m256 acc[8];
    for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_ps();
    for (int r = 0; r < d_; ++r) {
      const __m256 c = _mm256_broadcast_ss(cs + r);
      const float* m = m_.data() + r * kvd + e0;
      for (int k = 0; k < v; ++k) acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(m + 8 * k), c, acc[k]);
    }
    for (int k = 0; k < v; ++k) _mm256_storeu_ps(row + e0 + 8 * k, acc[k]);
  }
}

void KeyBias::scores_avx2(const float* coef, int G, int64_t p0, int64_t n, float* out) const {
  const int d = d_;
  constexpr int kMaxFloats = 16 * 256;  // turned coefficients of up to 16 heads of d 256, on the stack
  OSCAR_CHECK(G * d <= kMaxFloats, "key bias scores for {} heads × {}", G, d);
  alignas(32) float turned[kMaxFloats];
  alignas(32) float cs0[256];
  FarAnchor far;
  for (int64_t t = p0; t < p0 + n;) {
    const int64_t t0 = t - t % kBlock;
    const int j0 = int(t - t0), m = int(std::min<int64_t>(kBlock - j0, p0 + n - t));
    anchor(t0, far, cs0);
    for (int g = 0; g < G; ++g) turn(coef + int64_t(g) * d, cs0, turned + g * d);
    const int tiles = (G + 5) / 6, per_tile = (G + tiles - 1) / tiles;  // e.g. 7 heads: 4 + 3
    for (int g0 = 0; g0 < G; g0 += per_tile) {
      const int H = std::min(per_tile, G - g0);
      const float* c = turned + g0 * d;
      for (int k = 0; k < m; k += 16) {
        float* o = out + g0 * n + (t - p0) + k;
        const int lanes = std::min(16, m - k);
        switch (H) {
          case 1: score_lanes<1>(c, table_.data(), d, j0 + k, lanes, o, n); break;
          case 2: score_lanes<2>(c, table_.data(), d, j0 + k, lanes, o, n); break;
          case 3: score_lanes<3>(c, table_.data(), d, j0 + k, lanes, o, n); break;
          case 4: score_lanes<4>(c, table_.data(), d, j0 + k, lanes, o, n); break;
          case 5: score_lanes<5>(c, table_.data(), d, j0 + k, lanes, o, n); break;
          default: score_lanes<6>(c, table_.data(), d, j0 + k, lanes, o, n); break;
        }
      }
    }
    t += m;
  }
}

}  // namespace oscar
