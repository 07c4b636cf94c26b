// AVX2 version of prefill_position.h: scores eight keys at a time (eight dot products
// reduced together by one horizontal-add tree, the same tree for every key whatever its
// place among the eight), then the weighted sum of values with each query head's output
// held in registers across the keys; d a multiple of 8.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "oscar/attention/attention_avx2_util.h"
#include "oscar/attention/prefill_position.h"
#include "oscar/ops/avx2_util.h"

namespace oscar {

namespace {

// out[c] += Σ_t p[t]·v_t[c] for c in [c0, c0 + 8·R), keys in position order, the R
// accumulators in registers (the same FMA sequence as accumulating in memory).
template <int R, typename Value>
inline void weighted_values(const float* p, float inv, int64_t visible, Value value, int c0, float* o) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t t = 0; t < visible; ++t) {
    const __m256 pt = _mm256_set1_ps(p[t] * inv);
    const float* vt = value(t) + c0;
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(pt, _mm256_loadu_ps(vt + 8 * r), acc[r]);
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(o + c0 + 8 * r, acc[r]);
}

}  // namespace

void prefill_position_avx2(const PrefillPositionArgs& a, const float* q, int64_t visible, float* scores, float* out) {
  const int d = a.head_dim, G = a.group;
  if (d % 8 != 0 || G > 16) return prefill_position_ref(a, q, visible, scores, out);
  auto key = [&](int64_t t) { return (t >= a.hb && t < a.he ? a.kq : a.k) + t * d; };
  auto value = [&](int64_t t) { return (t >= a.hb && t < a.he ? a.vq : a.v) + t * d; };
  const __m256 scale = _mm256_set1_ps(a.scale);
  for (int64_t t0 = 0; t0 < visible; t0 += 8) {
    const int n = int(std::min<int64_t>(8, visible - t0));
    const float* kt[8];
    for (int j = 0; j < 8; ++j) kt[j] = key(t0 + std::min(j, n - 1));  // past the end: a repeat, not stored
    for (int g = 0; g < G; ++g) {
      const float* qg = q + g * d;
      __m256 acc[8];
      for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
      for (int c = 0; c < d; c += 8) {
        const __m256 qc = _mm256_loadu_ps(qg + c);
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kt[j] + c), acc[j]);
      }
      store_lanes(scores + g * visible + t0, _mm256_mul_ps(hsum8x8(acc), scale), n);
    }
  }
  for (int g = 0; g < G; ++g) {
    float* s = scores + g * visible;
    const float m = *std::max_element(s, s + visible);
    float sum = 0.0f;
    for (int64_t t = 0; t < visible; ++t) sum += (s[t] = std::exp(s[t] - m));
    const float inv = 1.0f / sum;
    float* o = out + g * d;
    int c0 = 0;
    for (; c0 + 64 <= d; c0 += 64) weighted_values<8>(s, inv, visible, value, c0, o);
    for (; c0 < d; c0 += 8) weighted_values<1>(s, inv, visible, value, c0, o);
  }
}

}  // namespace oscar
