// AVX2 dequantization of Q6_K rows for the panel path of linear(): the same values, bit for
// bit, as formats' scalar dequantize_row (which GCC does not vectorize for Q6_K's layout,
// leaving it ~5× slower per element than the other formats).
#include <immintrin.h>

#include <cstring>

#include "oscar/qmat/dequant.h"

namespace oscar::qmat {
namespace {

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// 32 quants (int8 in [−32, 31]) in two groups of 16, scaled by s0 and s1 (as the scalar
// code: y = (d·sc)·q, both products rounded in f32).
inline void store_scaled(__m256i q, float s0, float s1, float* y) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m256 v0 = _mm256_set1_ps(s0), v1 = _mm256_set1_ps(s1);
  _mm256_storeu_ps(y, _mm256_mul_ps(v0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(v0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
  _mm256_storeu_ps(y + 16, _mm256_mul_ps(v1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
  _mm256_storeu_ps(y + 24, _mm256_mul_ps(v1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}

}  // namespace

// Q6_K block (256 elements, 210 bytes): ql[128] low nibbles, qh[64] 2-bit high parts,
// int8 scales[16] (one per 16 elements), f16 d. Each 128-element half takes 64 bytes of
// ql, 32 of qh and 8 scales; element l + 32·j of the half is (nibble, 2 bits) number j of
// byte l.
void dequantize_q6_k_avx2(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03), off = _mm256_set1_epi8(32);
  for (int64_t blk = 0; blk < n / 256; ++blk, b += 210, dst += 256) {
    uint16_t dbits;
    std::memcpy(&dbits, b + 208, 2);
    const float d = _cvtsh_ss(dbits);
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b + 64 * half;
      const uint8_t* qh = b + 128 + 32 * half;
      const int8_t* s = sc + 8 * half;
      float* y = dst + 128 * half;
      const __m256i a = load32(ql), c = load32(ql + 32), h = load32(qh);
      // Byte shifts done on 16-bit lanes, then masked: no bits cross into a neighbour.
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
      const __m256i q2 = _mm256_or_si256(_mm256_and_si256(c, m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
      const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
      const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
      store_scaled(_mm256_sub_epi8(q1, off), d * float(s[0]), d * float(s[1]), y);
      store_scaled(_mm256_sub_epi8(q2, off), d * float(s[2]), d * float(s[3]), y + 32);
      store_scaled(_mm256_sub_epi8(q3, off), d * float(s[4]), d * float(s[5]), y + 64);
      store_scaled(_mm256_sub_epi8(q4, off), d * float(s[6]), d * float(s[7]), y + 96);
    }
  }
}

}  // namespace oscar::qmat
