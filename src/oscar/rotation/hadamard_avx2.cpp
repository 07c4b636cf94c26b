// AVX2 fast Walsh–Hadamard transform: the three stages with stride 1, 2, 4 stay inside one
// 8-float register (swap neighbours, then add on the low lanes and subtract on the high
// ones); strides ≥ 8 are plain vector butterflies between registers.
#include <immintrin.h>

#include <cmath>

#include "oscar/rotation/hadamard.h"

namespace oscar {

namespace {

// One register through the stride-1, 2 and 4 stages. With s the partner lanes,
// low lanes of each pair become v + s and high lanes s − v (= a − b).
inline __m256 fwht8(__m256 v) {
  __m256 s = _mm256_permute_ps(v, 0b10110001);  // swap lanes (0,1), (2,3), …
  v = _mm256_blend_ps(_mm256_add_ps(v, s), _mm256_sub_ps(s, v), 0b10101010);
  s = _mm256_permute_ps(v, 0b01001110);  // swap lane pairs within each 128-bit half
  v = _mm256_blend_ps(_mm256_add_ps(v, s), _mm256_sub_ps(s, v), 0b11001100);
  s = _mm256_permute2f128_ps(v, v, 1);  // swap the 128-bit halves
  v = _mm256_blend_ps(_mm256_add_ps(v, s), _mm256_sub_ps(s, v), 0b11110000);
  return v;
}

}  // namespace

void hadamard_transform_avx2(float* x, int d) {
  if (d < 8) return hadamard_transform_ref(x, d);
  const bool last_in_register = d == 8;
  const __m256 scale = _mm256_set1_ps(1.0f / std::sqrt(static_cast<float>(d)));
  for (int i = 0; i < d; i += 8) {
    __m256 v = fwht8(_mm256_loadu_ps(x + i));
    if (last_in_register) v = _mm256_mul_ps(v, scale);
    _mm256_storeu_ps(x + i, v);
  }
  if (last_in_register) return;
  for (int h = 8; h < d; h *= 2) {
    const bool last = 2 * h == d;
    for (int i = 0; i < d; i += 2 * h) {
      for (int j = i; j < i + h; j += 8) {
        const __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
        __m256 lo = _mm256_add_ps(a, b), hi = _mm256_sub_ps(a, b);
        if (last) {  // fold the normalization into the final stage
          lo = _mm256_mul_ps(lo, scale);
          hi = _mm256_mul_ps(hi, scale);
        }
        _mm256_storeu_ps(x + j, lo);
        _mm256_storeu_ps(x + j + h, hi);
      }
    }
  }
}

}  // namespace oscar
