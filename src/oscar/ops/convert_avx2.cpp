// AVX2 bf16 conversion: bf16 is the high half of an f32, so widening is a shift and
// narrowing is round-to-nearest-even on the low 16 bits (NaN kept quiet).
#include <immintrin.h>

#include "oscar/ops/convert.h"

namespace oscar {

void bf16_to_f32_avx2(const bf16* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(y + i, _mm256_castsi256_ps(w));
  }
  bf16_to_f32_ref(x + i, y + i, n - i);
}

void f32_to_bf16_avx2(const float* x, bf16* y, int64_t n) {
  int64_t i = 0;
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), is_nan);
    r = _mm256_srli_epi32(r, 16);
    // pack 8 × u32 (values < 65536) into 8 × u16
    const __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm_packus_epi32(lo, hi));
  }
  f32_to_bf16_ref(x + i, y + i, n - i);
}

}  // namespace oscar
