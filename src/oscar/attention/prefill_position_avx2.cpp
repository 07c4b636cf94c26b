// AVX2 version of prefill_position.h: each key row is loaded once for all the group's query
// heads (GQA), each value row once for all their probabilities; d a multiple of 8.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "oscar/attention/prefill_position.h"
#include "oscar/ops/avx2_util.h"

namespace oscar {

void prefill_position_avx2(const PrefillPositionArgs& a, const float* q, int64_t visible, float* scores, float* out) {
  const int d = a.head_dim, G = a.group;
  if (d % 8 != 0 || G > 16) return prefill_position_ref(a, q, visible, scores, out);
  auto key = [&](int64_t t) { return (t >= a.hb && t < a.he ? a.kq : a.k) + t * d; };
  auto value = [&](int64_t t) { return (t >= a.hb && t < a.he ? a.vq : a.v) + t * d; };
  for (int64_t t = 0; t < visible; ++t) {
    const float* kt = key(t);
    for (int g = 0; g < G; ++g) {
      const float* qg = q + g * d;
      __m256 acc = _mm256_setzero_ps();
      for (int c = 0; c < d; c += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(qg + c), _mm256_loadu_ps(kt + c), acc);
      scores[g * visible + t] = hsum8(acc) * a.scale;
    }
  }
  float inv[16];
  for (int g = 0; g < G; ++g) {
    float* s = scores + g * visible;
    const float m = *std::max_element(s, s + visible);
    float sum = 0.0f;
    for (int64_t t = 0; t < visible; ++t) sum += (s[t] = std::exp(s[t] - m));
    inv[g] = 1.0f / sum;
  }
  std::fill(out, out + int64_t(G) * d, 0.0f);
  for (int64_t t = 0; t < visible; ++t) {
    const float* vt = value(t);
    for (int g = 0; g < G; ++g) {
      const __m256 p = _mm256_set1_ps(scores[g * visible + t] * inv[g]);
      float* o = out + g * d;
      for (int c = 0; c < d; c += 8)
        _mm256_storeu_ps(o + c, _mm256_fmadd_ps(p, _mm256_loadu_ps(vt + c), _mm256_loadu_ps(o + c)));
    }
  }
}

}  // namespace oscar
