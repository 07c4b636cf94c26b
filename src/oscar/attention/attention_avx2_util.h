// Helpers of the AVX2 decode kernels: the softmax exp and a batched horizontal sum.
// Include only from *_avx2.cpp files (compiled with -mavx2 -mfma).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace oscar {

// exp(x) for 8 floats, x <= 0 (softmax weights exp(s − m)): Cephes' expf polynomial after
// a Cody–Waite reduction by ln 2, within 2 ulp of std::exp; x below −87.3 gives 0.
inline __m256 exp_nonpos_avx2(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  // n = round(x / ln 2); r = x − n·ln 2 in two steps (ln 2 = hi + lo, hi exact in 9 bits).
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // · 2^n through the exponent field (n in [−126, 0]: a normal power of two).
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(underflow, y);
}

// [Σ v[0], Σ v[1], …, Σ v[7]]: eight horizontal sums for about the shuffles of three.
inline __m256 hsum8x8(const __m256* v) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

// dst[0, nt) = the first nt lanes of r (nt ≤ 8).
inline void store_lanes(float* dst, __m256 r, int nt) {
  if (nt == 8) return _mm256_storeu_ps(dst, r);
  alignas(32) float buf[8];
  _mm256_store_ps(buf, r);
  std::copy(buf, buf + nt, dst);
}

// s[t] = (s[t] + add[t]) · scale (add may be null); returns the max.
inline float scale_scores(float* s, const float* add, int n, float scale) {
  const __m256 vs = _mm256_set1_ps(scale);
  __m256 mx = _mm256_set1_ps(-INFINITY);
  int t = 0;
  for (; t + 8 <= n; t += 8) {
    __m256 x = _mm256_loadu_ps(s + t);
    if (add) x = _mm256_add_ps(x, _mm256_loadu_ps(add + t));
    x = _mm256_mul_ps(x, vs);
    _mm256_storeu_ps(s + t, x);
    mx = _mm256_max_ps(mx, x);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mx);
  float r = *std::max_element(lanes, lanes + 8);
  for (; t < n; ++t) {
    s[t] = (s[t] + (add ? add[t] : 0.0f)) * scale;
    r = std::max(r, s[t]);
  }
  return r;
}

}  // namespace oscar
