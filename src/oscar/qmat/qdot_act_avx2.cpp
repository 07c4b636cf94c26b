// AVX2 activation quantizer: byte-identical to quantize_act_ref (same scalar d and 1/d,
// the same f32 product x · (1/d), rounded to nearest even).
#include <immintrin.h>

#include "oscar/qmat/qdot.h"

namespace oscar::qmat {

void quantize_act_avx2(const float* x, ActQ8Block* out, int64_t k) {
  const int64_t nb = k / act_block;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i lim_hi = _mm256_set1_epi32(127), lim_lo = _mm256_set1_epi32(-127);
  // packs_epi32 then packs_epi16 interleave the 128-bit lanes; this puts the 8 dwords back in order.
  const __m256i unshuffle = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < nb; ++b, x += act_block) {
    __m256 v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(x + 8 * j);
    // max|x| is exact in any order, so the scalar d below equals the reference's.
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[j], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q[j] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(r), lim_hi), lim_lo);
    }
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    const int isum = _mm_cvtsi128_si32(s4);
    // Values are already in [-127, 127], so the saturating packs are exact.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), _mm256_permutevar8x32_epi32(p, unshuffle));
    out[b].d = d;
    out[b].sum = d * static_cast<float>(isum);
  }
}

}  // namespace oscar::qmat
