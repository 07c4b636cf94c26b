// Small AVX2 helpers shared by the *_avx2.cpp kernels (include only from those files:
// they are the ones compiled with -mavx2 -mfma -mf16c).
#pragma once
#include <immintrin.h>

namespace oscar {

// Sum of the 8 lanes.
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace oscar
