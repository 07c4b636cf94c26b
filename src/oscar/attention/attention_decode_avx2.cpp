// AVX2 decode chunk over full-precision rows (sink / recent): K/V rows widened to f32 in
// registers (bf16 is a shift). Sub-chunks of 256 keys: the scores of all the group's heads
// (horizontal sums eight rows at a time), softmax weights by the vector exp, then the
// weighted sum with a (head tile × 32 dims) block of accumulators in registers, so that the
// output is stored once per sub-chunk rather than read and written for every key.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "oscar/attention/attention_avx2_util.h"
#include "oscar/attention/attention_decode_kernels.h"
#include "oscar/ops/avx2_util.h"

namespace oscar {

namespace {

constexpr int kSub = 256;

template <bool F32>
inline __m256 load8(const uint8_t* row, int i) {
  if constexpr (F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// out[g·kSub + t] = q_g · k_t for all G heads, t < n.
template <bool F32>
void fp_scores(const uint8_t* const* rows, int n, int d, const float* q, int G, float* out) {
  for (int t0 = 0; t0 < n; t0 += 8) {
    const int nt = std::min(8, n - t0);
    __m256 lanes[kMaxDecodeGroup][8];
    for (int u = 0; u < 8; ++u) {
      if (u >= nt) {
        for (int g = 0; g < G; ++g) lanes[g][u] = _mm256_setzero_ps();
        continue;
      }
      const uint8_t* row = rows[t0 + u];
      for (int g0 = 0; g0 < G; g0 += 4) {  // 4 heads × 2 accumulators in registers
        const int gn = std::min(4, G - g0);
        __m256 acc[4][2];
        for (int g = 0; g < 4; ++g) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
        for (int i = 0; i < d; i += 8) {
          const __m256 k8 = load8<F32>(row, i);
          for (int g = 0; g < gn; ++g)
            acc[g][(i >> 3) & 1] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (g0 + g) * d + i), k8, acc[g][(i >> 3) & 1]);
        }
        for (int g = 0; g < gn; ++g) lanes[g0 + g][u] = _mm256_add_ps(acc[g][0], acc[g][1]);
      }
    }
    for (int g = 0; g < G; ++g) {
      store_lanes(out + g * kSub + t0, hsum8x8(lanes[g]), nt);
    }
  }
}

// o[g·d + i] = Σ_t p[g·kSub + t] · v_t[i] for heads [g0, g0 + HT) (o overwritten).
template <bool F32, int HT>
void fp_values(const uint8_t* const* rows, int n, int d, const float* p, int g0, float* o) {
  for (int i0 = 0; i0 < d; i0 += 32) {
    const int nv = std::min(4, (d - i0) / 8);
    __m256 acc[HT][4];
    for (int h = 0; h < HT; ++h)
      for (int s = 0; s < 4; ++s) acc[h][s] = _mm256_setzero_ps();
    for (int t = 0; t < n; ++t) {
      __m256 w[HT];
      for (int h = 0; h < HT; ++h) w[h] = _mm256_broadcast_ss(p + (g0 + h) * kSub + t);
      for (int s = 0; s < nv; ++s) {
        const __m256 v8 = load8<F32>(rows[t], i0 + 8 * s);
        for (int h = 0; h < HT; ++h) acc[h][s] = _mm256_fmadd_ps(w[h], v8, acc[h][s]);
      }
    }
    for (int h = 0; h < HT; ++h)
      for (int s = 0; s < nv; ++s) _mm256_storeu_ps(o + (g0 + h) * d + i0 + 8 * s, acc[h][s]);
  }
}

template <bool F32>
void fp_values_all(const uint8_t* const* rows, int n, int d, const float* p, int G, float* o) {
  for (int g0 = 0; g0 < G;) {
    const int left = G - g0, ht = left == 4 ? 2 : std::min(3, left);  // 4 → 2 + 2, else tiles of 3
    switch (ht) {
      case 1: fp_values<F32, 1>(rows, n, d, p, g0, o); break;
      case 2: fp_values<F32, 2>(rows, n, d, p, g0, o); break;
      default: fp_values<F32, 3>(rows, n, d, p, g0, o); break;
    }
    g0 += ht;
  }
}

}  // namespace

void decode_chunk_avx2(const DecodeChunk& c, SoftmaxPartial* part, float* part_o) {
  const int d = c.kv.head_dim, G = c.group;
  const int64_t n = c.end - c.begin;
  const bool f32 = c.kv.dtype == KvDtype::f32;
  const int64_t row_bytes = int64_t(d) * (f32 ? 4 : 2);
  alignas(32) float s[kMaxDecodeGroup * kSub];
  alignas(32) float o_sub[kMaxDecodeGroup * kMaxDecodeHeadDim];
  const uint8_t* krows[kSub];
  const uint8_t* vrows[kSub];
  for (int g = 0; g < G; ++g) {
    part[g] = SoftmaxPartial{};
    std::fill(part_o + g * d, part_o + (g + 1) * d, 0.0f);
  }
  for (int64_t t0 = 0; t0 < n; t0 += kSub) {
    const int m = int(std::min<int64_t>(kSub, n - t0));
    for (int t = 0; t < m;) {  // rows of one fp block are contiguous
      const int64_t first = c.begin + t0 + t, off = c.kv.row_offset(c.kv_head, first);
      const int run = int(std::min<int64_t>(m - t, c.kv.block_tokens - first % c.kv.block_tokens));
      for (int r = 0; r < run; ++r, ++t) {
        krows[t] = c.kv.k_pool + off + r * row_bytes;
        vrows[t] = c.kv.v_pool + off + r * row_bytes;
      }
    }
    if (f32) {
      fp_scores<true>(krows, m, d, c.q, G, s);
    } else {
      fp_scores<false>(krows, m, d, c.q, G, s);
    }
    for (int g = 0; g < G; ++g)
      fold_sub_chunk_avx2(s + g * kSub, c.score_add ? c.score_add + g * n + t0 : nullptr, m, c.scale, part[g],
                          part_o + g * d, d, t0 > 0);
    float* o = t0 == 0 ? part_o : o_sub;
    if (f32) {
      fp_values_all<true>(vrows, m, d, s, G, o);
    } else {
      fp_values_all<false>(vrows, m, d, s, G, o);
    }
    if (t0 > 0)
      for (int i = 0; i < G * d; ++i) part_o[i] += o_sub[i];
  }
}

}  // namespace oscar
