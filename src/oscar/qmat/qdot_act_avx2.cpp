// AVX2 activation quantizers: byte-identical to quantize_act_ref / quantize_act_k_ref (same
// scalar d and 1/d, the same f32 product x · (1/d), rounded to nearest even).
#include <immintrin.h>

#include "oscar/qmat/qdot.h"

namespace oscar::qmat {
namespace {

// max|x[i]| over n floats (n a multiple of 32); exact in any order, so the scalar d taken
// from it equals the reference's.
float abs_max(const float* x, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
}

// Stores x[0..32)·id rounded to nearest even and clamped to ±127 as 32 bytes at q, and
// returns the codes' lane-wise partial sums: *s0 over elements 0–15, *s1 over 16–31.
void quantize32(const float* x, __m256 vid, int8_t* q, __m256i* s0, __m256i* s1) {
  const __m256i lim_hi = _mm256_set1_epi32(127), lim_lo = _mm256_set1_epi32(-127);
  // packs_epi32 then packs_epi16 interleave the 128-bit lanes; this puts the 8 dwords back in order.
  const __m256i unshuffle = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256i v[4];
  for (int j = 0; j < 4; ++j) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), vid),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v[j] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(r), lim_hi), lim_lo);
  }
  // Values are already in [-127, 127], so the saturating packs are exact.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_permutevar8x32_epi32(p, unshuffle));
  *s0 = _mm256_add_epi32(v[0], v[1]);
  *s1 = _mm256_add_epi32(v[2], v[3]);
}

// The four totals of four 8-lane int32 vectors, in order.
__m128i hsum4x8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

}  // namespace

void quantize_act_avx2(const float* x, ActQ8Block* out, int64_t k) {
  const int64_t nb = k / act_block;
  for (int64_t b = 0; b < nb; ++b, x += act_block) {
    const float d = abs_max(x, act_block) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    __m256i s0, s1;
    quantize32(x, _mm256_set1_ps(id), out[b].q, &s0, &s1);
    const __m128i s4 = hsum4x8(s0, s1, _mm256_setzero_si256(), _mm256_setzero_si256());
    const int isum = _mm_cvtsi128_si32(s4) + _mm_extract_epi32(s4, 1);
    out[b].d = d;
    out[b].sum = d * static_cast<float>(isum);
  }
}

void quantize_act_k_avx2(const float* x, ActQ8KBlock* out, int64_t k) {
  const int64_t nb = k / act_k_block;
  for (int64_t b = 0; b < nb; ++b, x += act_k_block) {
    ActQ8KBlock& o = out[b];
    const float d = abs_max(x, act_k_block) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i s[16];  // lane-wise partial sums of the 16-element groups
    for (int c = 0; c < 8; ++c) quantize32(x + 32 * c, vid, o.q + 32 * c, &s[2 * c], &s[2 * c + 1]);
    // |Σ| ≤ 16·127 = 2032, so the saturating pack to int16 is exact.
    const __m128i lo = _mm_packs_epi32(hsum4x8(s[0], s[1], s[2], s[3]), hsum4x8(s[4], s[5], s[6], s[7]));
    const __m128i hi = _mm_packs_epi32(hsum4x8(s[8], s[9], s[10], s[11]), hsum4x8(s[12], s[13], s[14], s[15]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.bsums), lo);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.bsums + 8), hi);
    o.d = d;
  }
}

}  // namespace oscar::qmat
