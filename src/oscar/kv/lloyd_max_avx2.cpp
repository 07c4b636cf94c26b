// AVX2 kernels of the exact Lloyd-Max INT2 codec: the 4 levels of a group sit in a register
// (twice, lanes 0-3 and 4-7) and each 2-bit code indexes them with one vpermps.
#include <immintrin.h>

#include "oscar/ops/avx2_util.h"

#include "oscar/kv/lloyd_max.h"

namespace oscar {
namespace {

inline __m256i load8_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

inline __m256i part_codes(__m256i v, int s) {  // s is unrolled to a constant
  return _mm256_and_si256(_mm256_srli_epi32(v, 2 * s), _mm256_set1_epi32(3));
}

inline __m256 level_table(const float lev[4]) {
  return _mm256_setr_ps(lev[0], lev[1], lev[2], lev[3], lev[0], lev[1], lev[2], lev[3]);
}

}  // namespace

void dequantize_row_lloyd_max_exact_avx2(const QuantParams& p, const uint8_t* in, float* x) {
  const int G = p.group, part = G / 4;
  for (int g = 0; g < p.head_dim / G; ++g) {
    float lev[4];
    lloyd_max_exact_levels(p, in, g, lev);
    const __m256 t = level_table(lev);
    for (int j = 0; j < part; j += 8) {
      const __m256i v = load8_u8(in + size_t(g) * part + j);
      for (int s = 0; s < 4; ++s)
        _mm256_storeu_ps(x + g * G + j + s * part, _mm256_permutevar8x32_ps(t, part_codes(v, s)));
    }
  }
}

float dot_row_lloyd_max_exact_avx2(const QuantParams& p, const float* q, const uint8_t* row) {
  const int G = p.group, part = G / 4;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int g = 0; g < p.head_dim / G; ++g) {
    float lev[4];
    lloyd_max_exact_levels(p, row, g, lev);
    const __m256 t = level_table(lev);
    const float* qg = q + g * G;
    for (int j = 0; j < part; j += 8) {
      const __m256i v = load8_u8(row + size_t(g) * part + j);
      for (int s = 0; s < 4; ++s)
        acc[s] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(t, part_codes(v, s)), _mm256_loadu_ps(qg + j + s * part),
                                 acc[s]);
    }
  }
  return hsum8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

void axpy_row_lloyd_max_exact_avx2(const QuantParams& p, float a, const uint8_t* row, float* acc) {
  const int G = p.group, part = G / 4;
  for (int g = 0; g < p.head_dim / G; ++g) {
    float lev[4];
    lloyd_max_exact_levels(p, row, g, lev);
    for (float& l : lev) l *= a;  // a·x̂ = (a·level)[code], the reference's rounding
    const __m256 t = level_table(lev);
    for (int j = 0; j < part; j += 8) {
      const __m256i v = load8_u8(row + size_t(g) * part + j);
      for (int s = 0; s < 4; ++s) {
        float* o = acc + g * G + j + s * part;
        _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), _mm256_permutevar8x32_ps(t, part_codes(v, s))));
      }
    }
  }
}

}  // namespace oscar
