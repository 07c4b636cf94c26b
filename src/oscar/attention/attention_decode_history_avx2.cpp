// AVX2 decode over packed history rows of the per-token formats (uniform INT2/4/8, both
// Lloyd-Max INT2 variants). Every group's dequantization is affine in a per-code value:
//   x̂_i = α·T[code_i] + β   uniform: T = code, α = s, β = −z·s;   Lloyd-Max exact: T = the
//   centroids, α = σ, β = μ
// so each row's codes are expanded once (INT2: shift + vpermilps on the 4-entry table) for a
// tile of query heads of the GQA group, and α, β are applied once per (row, group, head):
//   scores:  q·x̂ = Σ_g α_g·(q_g·T[c_g]) + β_g·Σq_g
//   values:  Σ_t p_t·x̂_t = Σ_t (p_t·α_t)·T[c_t] + Σ_t p_t·β_t    (per group)
// Scores of a sub-chunk of ≤ 256 rows, then its softmax weights (vector exp), then the
// weighted sum with the accumulators of a (head tile × 8 code bytes) slice in registers.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "oscar/attention/attention_avx2_util.h"
#include "oscar/attention/attention_decode_kernels.h"
#include "oscar/kv/lloyd_max.h"
#include "oscar/ops/avx2_util.h"

namespace oscar {

namespace {

constexpr int kSub = 256;  // rows per scoring pass (stack buffers)
constexpr int kMaxGroups = kMaxDecodeHeadDim / 32;

// The row layout the kernels read (quant_codec.h): codes, then per group a pair of fp16.
struct RowFormat {
  int bits = 2;
  bool centroids = false;  // Lloyd-Max exact: pair = (μ, σ), T = centroids; else (s, z), T = code
  int head_dim = 0, group = 0;
  size_t code_bytes = 0;
};

RowFormat row_format(const HistoryFormat& f) {
  RowFormat r;
  r.bits = f.quant == KvQuant::int8 ? 8 : f.quant == KvQuant::int4 ? 4 : 2;
  r.centroids = f.quant == KvQuant::int2_lloyd_max_exact;
  r.head_dim = f.head_dim;
  r.group = f.group;
  r.code_bytes = size_t(f.head_dim) * size_t(r.bits) / 8;
  return r;
}

// α, β of group g of a row (see the file comment).
inline void group_affine(const RowFormat& f, const uint8_t* row, int g, float* alpha, float* beta) {
  uint16_t pair[2];
  std::memcpy(pair, row + f.code_bytes + size_t(g) * 4, 4);
  const float a = _cvtsh_ss(pair[0]), b = _cvtsh_ss(pair[1]);
  if (f.centroids) {
    *alpha = b;  // σ
    *beta = a;   // μ
  } else {
    *alpha = a;       // s
    *beta = -b * a;   // −z·s
  }
}

// alpha[t], beta[t] of group g for rows t < n: eight rows' fp16 pairs by two gathers.
void rows_affine(const RowFormat& f, const uint8_t* const* rows, int n, int g, float* alpha, float* beta) {
  const uint8_t* base = rows[0];
  const __m256i shift = _mm256_set1_epi64x(int64_t(f.code_bytes) + 4 * g - reinterpret_cast<int64_t>(base));
  const __m128i lo16 = _mm_set1_epi32(0xFFFF);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int t = 0;
  for (; t + 8 <= n; t += 8) {
    const __m256i i0 = _mm256_add_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + t)), shift);
    const __m256i i1 = _mm256_add_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + t + 4)), shift);
    const __m128i a = _mm256_i64gather_epi32(reinterpret_cast<const int*>(base), i0, 1);
    const __m128i b = _mm256_i64gather_epi32(reinterpret_cast<const int*>(base), i1, 1);
    const __m256 first = _mm256_cvtph_ps(_mm_packus_epi32(_mm_and_si128(a, lo16), _mm_and_si128(b, lo16)));
    const __m256 second = _mm256_cvtph_ps(_mm_packus_epi32(_mm_srli_epi32(a, 16), _mm_srli_epi32(b, 16)));
    if (f.centroids) {  // (μ, σ)
      _mm256_storeu_ps(alpha + t, second);
      _mm256_storeu_ps(beta + t, first);
    } else {  // (s, z): α = s, β = (−z)·s as group_affine
      _mm256_storeu_ps(alpha + t, first);
      _mm256_storeu_ps(beta + t, _mm256_mul_ps(_mm256_xor_ps(second, sign), first));
    }
  }
  for (; t < n; ++t) group_affine(f, rows[t], g, alpha + t, beta + t);
}

inline __m256i load8_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// T[code] of part S (codes in bits [S·BITS, (S+1)·BITS) of each of 8 expanded bytes).
template <int BITS, int S>
inline __m256 code_values(__m256i v, __m256 table) {
  if constexpr (BITS == 2) {
    // vpermilps reads bits [1:0] of each index lane: no mask needed.
    return _mm256_permutevar_ps(table, S == 0 ? v : _mm256_srli_epi32(v, 2 * S));
  } else if constexpr (BITS == 4) {
    return _mm256_cvtepi32_ps(_mm256_and_si256(S == 0 ? v : _mm256_srli_epi32(v, 4 * S), _mm256_set1_epi32(15)));
  } else {
    return _mm256_cvtepi32_ps(v);
  }
}

// Calls f(std::integral_constant<int, S>) for S = 0 .. K−1.
template <int K, typename F, int... S>
inline void for_parts_impl(F&& f, std::integer_sequence<int, S...>) {
  (f(std::integral_constant<int, S>{}), ...);
}
template <int K, typename F>
inline void for_parts(F&& f) {
  for_parts_impl<K>(f, std::make_integer_sequence<int, K>{});
}

// out[h·out_stride + t] = q_h · x̂_t for the HT heads of a tile, t < n.
// q: [HT, d]; qsum: [HT, kMaxGroups] Σq per group. Rows go in runs of 8 whose 8 lane
// vectors are summed together (hsum8x8), a third of the cost of 8 separate sums.
template <int BITS, int HT>
void tile_scores(const RowFormat& f, const uint8_t* const* rows, int n, const float* q, const float* qsum,
                 const float* alpha, const float* beta, __m256 table, float* out, int out_stride) {
  constexpr int K = 8 / BITS;
  const int d = f.head_dim, G = f.group, part = G / K, n_groups = d / G;
  for (int t0 = 0; t0 < n; t0 += 8) {
    const int nt = std::min(8, n - t0);
    __m256 lanes[HT][8];
    alignas(32) float off[HT][8];
    for (int u = 0; u < 8; ++u) {
      if (u >= nt) {
        for (int h = 0; h < HT; ++h) {
          lanes[h][u] = _mm256_setzero_ps();
          off[h][u] = 0.0f;
        }
        continue;
      }
      const uint8_t* row = rows[t0 + u];
      __m256 tot[HT];
      for (int h = 0; h < HT; ++h) {
        tot[h] = _mm256_setzero_ps();
        off[h][u] = 0.0f;
      }
      for (int g = 0; g < n_groups; ++g) {
        const uint8_t* codes = row + size_t(g) * size_t(part);
        const float* qg = q + g * G;
        // Two accumulators per head (even / odd parts) halve the FMA dependency chain.
        __m256 acc[HT][2];
        for (int h = 0; h < HT; ++h) acc[h][0] = acc[h][1] = _mm256_setzero_ps();
        for (int j = 0; j < part; j += 8) {
          const __m256i v = load8_u8(codes + j);
          for_parts<K>([&](auto S) {
            const __m256 x = code_values<BITS, S.value>(v, table);
            for (int h = 0; h < HT; ++h)
              acc[h][S.value & 1] =
                  _mm256_fmadd_ps(_mm256_loadu_ps(qg + h * d + j + S.value * part), x, acc[h][S.value & 1]);
          });
        }
        const __m256 va = _mm256_broadcast_ss(alpha + g * kSub + t0 + u);
        const float b = beta[g * kSub + t0 + u];
        for (int h = 0; h < HT; ++h) {
          tot[h] = _mm256_fmadd_ps(_mm256_add_ps(acc[h][0], acc[h][1]), va, tot[h]);
          off[h][u] += b * qsum[h * kMaxGroups + g];
        }
      }
      for (int h = 0; h < HT; ++h) lanes[h][u] = tot[h];
    }
    for (int h = 0; h < HT; ++h) {
      store_lanes(out + h * out_stride + t0, _mm256_add_ps(hsum8x8(lanes[h]), _mm256_load_ps(off[h])), nt);
    }
  }
}

// o[h·d + i] = Σ_t p[h·p_stride + t] · x̂_t[i] for the HT heads of a tile (o overwritten).
// The K parts of an 8-byte slice go in passes of P parts, so that the HT·P accumulators,
// HT weights and the code vectors stay in the 16 registers (a spilled accumulator puts a
// store-to-load round trip on every row).
template <int BITS, int HT>
void tile_values(const RowFormat& f, const uint8_t* const* rows, int n, const float* p, int p_stride,
                 const float* alpha, const float* beta, __m256 table, float* o) {
  constexpr int K = 8 / BITS, P = std::min(K, 8 / HT);
  const int d = f.head_dim, G = f.group, part = G / K, n_groups = d / G;
  alignas(32) float a[HT][kSub];  // p·α of each row, for the current group
  for (int g = 0; g < n_groups; ++g) {
    float bias[HT];
    const float* ag = alpha + g * kSub;
    const float* bg = beta + g * kSub;
    for (int h = 0; h < HT; ++h) {
      const float* ph = p + h * p_stride;
      __m256 bv = _mm256_setzero_ps();
      int t = 0;
      for (; t + 8 <= n; t += 8) {
        const __m256 pt = _mm256_loadu_ps(ph + t);
        _mm256_store_ps(&a[h][t], _mm256_mul_ps(pt, _mm256_loadu_ps(ag + t)));
        bv = _mm256_fmadd_ps(pt, _mm256_loadu_ps(bg + t), bv);
      }
      bias[h] = hsum8(bv);
      for (; t < n; ++t) {
        a[h][t] = ph[t] * ag[t];
        bias[h] += ph[t] * bg[t];
      }
    }
    const size_t code_off = size_t(g) * size_t(part);
    for (int j = 0; j < part; j += 8) {
      for_parts<K / P>([&](auto PASS) {
        __m256 acc[HT][P];
        for (int h = 0; h < HT; ++h)
          for (int s = 0; s < P; ++s) acc[h][s] = _mm256_setzero_ps();
        for (int t = 0; t < n; ++t) {
          const __m256i v = load8_u8(rows[t] + code_off + j);
          __m256 w[HT];
          for (int h = 0; h < HT; ++h) w[h] = _mm256_broadcast_ss(&a[h][t]);
          for_parts<P>([&](auto S) {
            const __m256 x = code_values<BITS, PASS.value * P + S.value>(v, table);
            for (int h = 0; h < HT; ++h) acc[h][S.value] = _mm256_fmadd_ps(w[h], x, acc[h][S.value]);
          });
        }
        for (int h = 0; h < HT; ++h) {
          const __m256 b = _mm256_set1_ps(bias[h]);
          for (int s = 0; s < P; ++s)
            _mm256_storeu_ps(o + h * d + g * G + j + (PASS.value * P + s) * part, _mm256_add_ps(acc[h][s], b));
        }
      });
    }
  }
}

template <int BITS>
void scores_dispatch(int ht, const RowFormat& f, const uint8_t* const* rows, int n, const float* q,
                     const float* qsum, const float* alpha, const float* beta, __m256 table, float* out,
                     int out_stride) {
  switch (ht) {
    case 1: return tile_scores<BITS, 1>(f, rows, n, q, qsum, alpha, beta, table, out, out_stride);
    case 2: return tile_scores<BITS, 2>(f, rows, n, q, qsum, alpha, beta, table, out, out_stride);
    case 3: return tile_scores<BITS, 3>(f, rows, n, q, qsum, alpha, beta, table, out, out_stride);
    default: return tile_scores<BITS, 4>(f, rows, n, q, qsum, alpha, beta, table, out, out_stride);
  }
}

template <int BITS>
void values_dispatch(int ht, const RowFormat& f, const uint8_t* const* rows, int n, const float* p, int p_stride,
                     const float* alpha, const float* beta, __m256 table, float* o) {
  switch (ht) {
    case 1: return tile_values<BITS, 1>(f, rows, n, p, p_stride, alpha, beta, table, o);
    case 2: return tile_values<BITS, 2>(f, rows, n, p, p_stride, alpha, beta, table, o);
    case 3: return tile_values<BITS, 3>(f, rows, n, p, p_stride, alpha, beta, table, o);
    default: return tile_values<BITS, 4>(f, rows, n, p, p_stride, alpha, beta, table, o);
  }
}

// Head tiles: at most 3 heads at INT2, else 4 (each tile expands the codes once); the
// group split into near-equal tiles (6 → 3 + 3, 7 → 2 + 2 + 3 at INT2).
int tile_count(int group, int bits) {
  const int max_tile = bits == 2 ? 3 : 4;
  return (group + max_tile - 1) / max_tile;
}

__m256 value_table(const RowFormat& f) {
  if (f.centroids)
    return _mm256_setr_ps(kLloydMaxCentroids[0], kLloydMaxCentroids[1], kLloydMaxCentroids[2], kLloydMaxCentroids[3],
                          kLloydMaxCentroids[0], kLloydMaxCentroids[1], kLloydMaxCentroids[2], kLloydMaxCentroids[3]);
  return _mm256_setr_ps(0, 1, 2, 3, 0, 1, 2, 3);  // INT2 only; wider codes are converted
}

void scores(const RowFormat& f, int h0, int ht, const uint8_t* const* rows, int n, const float* q, const float* qsum,
            const float* alpha, const float* beta, __m256 table, float* out, int out_stride) {
  const float* qt = q + h0 * f.head_dim;
  const float* qs = qsum + h0 * kMaxGroups;
  float* o = out + h0 * out_stride;
  switch (f.bits) {
    case 2: return scores_dispatch<2>(ht, f, rows, n, qt, qs, alpha, beta, table, o, out_stride);
    case 4: return scores_dispatch<4>(ht, f, rows, n, qt, qs, alpha, beta, table, o, out_stride);
    default: return scores_dispatch<8>(ht, f, rows, n, qt, qs, alpha, beta, table, o, out_stride);
  }
}

void values(const RowFormat& f, int h0, int ht, const uint8_t* const* rows, int n, const float* p, int p_stride,
            const float* alpha, const float* beta, __m256 table, float* o) {
  const float* pt = p + h0 * p_stride;
  float* ot = o + h0 * f.head_dim;
  switch (f.bits) {
    case 2: return values_dispatch<2>(ht, f, rows, n, pt, p_stride, alpha, beta, table, ot);
    case 4: return values_dispatch<4>(ht, f, rows, n, pt, p_stride, alpha, beta, table, ot);
    default: return values_dispatch<8>(ht, f, rows, n, pt, p_stride, alpha, beta, table, ot);
  }
}

// rows[t] = the packed row of token t0 + t (history blocks of block_tokens rows each).
void row_addresses(const KvSeqView& kv, const uint8_t* pool, const HistoryFormat& f, int kv_head, int64_t t0, int n,
                   const uint8_t** rows) {
  const int64_t bb = int64_t(f.block_bytes()), rb = bb / f.block_tokens;
  for (int t = 0; t < n;) {
    const int64_t i = t0 + t - kv.hist_begin;
    const uint8_t* block = pool + (int64_t(kv.q_blocks[i / f.block_tokens]) * kv.n_kv_heads + kv_head) * bb;
    for (int r = int(i % f.block_tokens); r < f.block_tokens && t < n; ++r, ++t) rows[t] = block + r * rb;
  }
}

}  // namespace

float softmax_exp_avx2(float* s, int64_t n, float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_nonpos_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + i), vm));
    _mm256_storeu_ps(s + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  float tail = 0.0f;
  if (i < n) {  // the last < 8 through a padded copy, so every weight uses the same exp
    alignas(32) float buf[8];
    for (int k = 0; k < 8; ++k) buf[k] = i + k < n ? s[i + k] - m : -INFINITY;
    _mm256_store_ps(buf, exp_nonpos_avx2(_mm256_load_ps(buf)));
    for (int64_t k = 0; i + k < n; ++k) tail += (s[i + k] = buf[k]);
  }
  return hsum8(sum) + tail;
}

void fold_sub_chunk_avx2(float* s, const float* add, int64_t m, float scale, SoftmaxPartial& part, float* o, int d,
                         bool rescale_o) {
  const float mx = scale_scores(s, add, int(m), scale);
  // Rescale what the earlier sub-chunks gave.
  const float m_new = std::max(part.m, mx);
  const float corr = part.l > 0.0f ? std::exp(part.m - m_new) : 0.0f;
  part.l = part.l * corr + softmax_exp_avx2(s, m, m_new);
  part.m = m_new;
  if (rescale_o)
    for (int i = 0; i < d; ++i) o[i] *= corr;
}

bool decode_history_avx2_supports(const HistoryFormat& f) {
  if (f.per_channel) return false;
  switch (f.quant) {
    case KvQuant::int2:
    case KvQuant::int2_lloyd_max:
    case KvQuant::int2_lloyd_max_exact:
    case KvQuant::int4:
    case KvQuant::int8: break;
    default: return false;
  }
  const int bits = f.quant == KvQuant::int8 ? 8 : f.quant == KvQuant::int4 ? 4 : 2;
  // Codes are read 8 bytes at a time inside one group's part.
  return f.head_dim <= kMaxDecodeHeadDim && f.group >= 8 && f.head_dim % f.group == 0 &&
         (f.group * bits / 8) % 8 == 0 && f.head_dim / f.group <= kMaxGroups;
}

void decode_chunk_history_avx2(const DecodeChunk& c, SoftmaxPartial* part, float* part_o) {
  const int d = c.kv.head_dim, n_heads = c.group;
  const int64_t n = c.end - c.begin;
  const HistoryFormat& kf = *c.kv.k_format;
  const HistoryFormat& vf = *c.kv.v_format;
  const RowFormat kr = row_format(kf), vr = row_format(vf);
  const __m256 ktab = value_table(kr), vtab = value_table(vr);
  const int k_tiles = tile_count(n_heads, kr.bits), v_tiles = tile_count(n_heads, vr.bits);

  float qsum[kMaxDecodeGroup * kMaxGroups];  // Σq per (head, key group)
  for (int h = 0; h < n_heads; ++h)
    for (int g = 0; g < d / kr.group; ++g) {
      __m256 a = _mm256_setzero_ps();
      for (int i = 0; i < kr.group; i += 8) a = _mm256_add_ps(a, _mm256_loadu_ps(c.q + h * d + g * kr.group + i));
      qsum[h * kMaxGroups + g] = hsum8(a);
    }

  alignas(32) float s[kMaxDecodeGroup * kSub];  // scores, then weights: [head, row]
  alignas(32) float o_sub[kMaxDecodeGroup * kMaxDecodeHeadDim];
  const uint8_t* krows[kSub];
  const uint8_t* vrows[kSub];
  alignas(32) float k_alpha[kMaxGroups * kSub], k_beta[kMaxGroups * kSub];  // [group, row]
  alignas(32) float v_alpha[kMaxGroups * kSub], v_beta[kMaxGroups * kSub];
  for (int h = 0; h < n_heads; ++h) {
    part[h] = SoftmaxPartial{};
    std::fill(part_o + h * d, part_o + (h + 1) * d, 0.0f);
  }
  for (int64_t t0 = 0; t0 < n; t0 += kSub) {
    const int m = int(std::min<int64_t>(kSub, n - t0));
    row_addresses(c.kv, c.kv.qk_pool, kf, c.kv_head, c.begin + t0, m, krows);
    row_addresses(c.kv, c.kv.qv_pool, vf, c.kv_head, c.begin + t0, m, vrows);
    for (int g = 0; g < d / kr.group; ++g) rows_affine(kr, krows, m, g, k_alpha + g * kSub, k_beta + g * kSub);
    for (int g = 0; g < d / vr.group; ++g) rows_affine(vr, vrows, m, g, v_alpha + g * kSub, v_beta + g * kSub);
    for (int k = 0, h0 = 0; k < k_tiles; ++k) {
      const int ht = (n_heads - h0) / (k_tiles - k);
      scores(kr, h0, ht, krows, m, c.q, qsum, k_alpha, k_beta, ktab, s, kSub);
      h0 += ht;
    }
    for (int h = 0; h < n_heads; ++h)
      fold_sub_chunk_avx2(s + h * kSub, c.score_add ? c.score_add + h * n + t0 : nullptr, m, c.scale, part[h],
                          part_o + h * d, d, t0 > 0);
    float* o = t0 == 0 ? part_o : o_sub;
    for (int k = 0, h0 = 0; k < v_tiles; ++k) {
      const int ht = (n_heads - h0) / (v_tiles - k);
      values(vr, h0, ht, vrows, m, s, kSub, v_alpha, v_beta, vtab, o);
      h0 += ht;
    }
    if (t0 > 0)
      for (int i = 0; i < n_heads * d; ++i) part_o[i] += o_sub[i];
  }
}

}  // namespace oscar
