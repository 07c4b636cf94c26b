// AVX2 decode chunk: K/V rows widened to f32 in registers (bf16 is a shift), dot
// products and the weighted sum with FMA.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "oscar/attention/attention_decode_kernels.h"
#include "oscar/ops/avx2_util.h"

namespace oscar {

namespace {
inline __m256 load8(const KvSeqView& kv, const uint8_t* row, int i) {
  if (kv.dtype == KvDtype::f32) return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
}  // namespace

void decode_chunk_avx2(const DecodeChunk& c, SoftmaxPartial* part, float* part_o) {
  const int d = c.kv.head_dim, G = c.group;
  const int64_t n = c.end - c.begin;
  constexpr int64_t kMaxChunk = 1024;
  float s[kMaxDecodeGroup][kMaxChunk];
  for (int64_t t0 = 0; t0 < n; t0 += kMaxChunk) {
    const int64_t m = std::min(kMaxChunk, n - t0);
    for (int64_t t = 0; t < m; ++t) {
      const uint8_t* row = c.kv.k_pool + c.kv.row_offset(c.kv_head, c.begin + t0 + t);
      __m256 acc[kMaxDecodeGroup];
      for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
      for (int i = 0; i < d; i += 8) {
        const __m256 kv8 = load8(c.kv, row, i);
        for (int g = 0; g < G; ++g) acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(c.q + g * d + i), kv8, acc[g]);
      }
      for (int g = 0; g < G; ++g) s[g][t] = (hsum8(acc[g]) + (c.score_add ? c.score_add[g * n + t0 + t] : 0.0f)) * c.scale;
    }
    // Fold this sub-chunk into the running partial of each query head.
    for (int g = 0; g < G; ++g) {
      const float m_new = std::max(t0 == 0 ? -INFINITY : part[g].m, *std::max_element(s[g], s[g] + m));
      const float corr = t0 == 0 ? 0.0f : std::exp(part[g].m - m_new);
      float l = t0 == 0 ? 0.0f : part[g].l * corr;
      float* o = part_o + g * d;
      if (t0 == 0) {
        std::fill(o, o + d, 0.0f);
      } else {
        for (int i = 0; i < d; ++i) o[i] *= corr;
      }
      for (int64_t t = 0; t < m; ++t) l += (s[g][t] = std::exp(s[g][t] - m_new));
      part[g].m = m_new;
      part[g].l = l;
    }
    for (int64_t t = 0; t < m; ++t) {
      const uint8_t* row = c.kv.v_pool + c.kv.row_offset(c.kv_head, c.begin + t0 + t);
      for (int i = 0; i < d; i += 8) {
        const __m256 v8 = load8(c.kv, row, i);
        for (int g = 0; g < G; ++g) {
          float* o = part_o + g * d + i;
          _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_set1_ps(s[g][t]), v8, _mm256_loadu_ps(o)));
        }
      }
    }
  }
  if (n == 0)
    for (int g = 0; g < G; ++g) {
      part[g] = SoftmaxPartial{};
      std::fill(part_o + g * d, part_o + (g + 1) * d, 0.0f);
    }
}

}  // namespace oscar
