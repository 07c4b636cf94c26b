// AVX2 dot products of one Q4_K / Q5_K / Q6_K weight row (k a multiple of 256) with its
// 8-bit activation row, or with four rows at once (qdot4: the same sums per row, the codes
// unpacked once); same sums as qdot_kquant_ref.cpp up to f32 summation order.
#include <immintrin.h>

#include <cstring>

#include "oscar/formats/block_fields.h"
#include "oscar/ops/avx2_util.h"
#include "oscar/qmat/qdot.h"

namespace oscar::qmat {
namespace {

constexpr int64_t qk_k = 256;
constexpr int64_t q4_k_bytes = 144;
constexpr int64_t q5_k_bytes = 176;
constexpr int64_t q6_k_bytes = 210;

inline float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Unpacks the 12 scale bytes of Q4_K/Q5_K: byte j of *sc / *m is sub-block j's 6-bit
// scale / min. Scales and mins 0-3 are the low 6 bits of bytes 0-3 / 4-7; 4-7 take
// their low nibble from bytes 8-11 (low / high half) and their top 2 bits from the top
// of bytes 0-3 / 4-7.
inline void unpack_scales(const uint8_t* s, uint64_t* sc, uint64_t* m) {
  const uint32_t a = block_u32(s), b = block_u32(s + 4), c = block_u32(s + 8);
  const uint32_t sc_lo = a & 0x3f3f3f3fu;
  const uint32_t sc_hi = (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
  const uint32_t m_lo = b & 0x3f3f3f3fu;
  const uint32_t m_hi = ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4);
  *sc = uint64_t(sc_lo) | (uint64_t(sc_hi) << 32);
  *m = uint64_t(m_lo) | (uint64_t(m_hi) << 32);
}

// A pshufb mask that broadcasts 16-bit word `lo` over the low 128-bit lane and word `hi`
// over the high one (pshufb stays inside each lane).
inline __m256i word_pick(int lo, int hi) {
  return _mm256_setr_epi8(char(2 * lo), char(2 * lo + 1), char(2 * lo), char(2 * lo + 1), char(2 * lo),
                          char(2 * lo + 1), char(2 * lo), char(2 * lo + 1), char(2 * lo), char(2 * lo + 1),
                          char(2 * lo), char(2 * lo + 1), char(2 * lo), char(2 * lo + 1), char(2 * lo),
                          char(2 * lo + 1), char(2 * hi), char(2 * hi + 1), char(2 * hi), char(2 * hi + 1),
                          char(2 * hi), char(2 * hi + 1), char(2 * hi), char(2 * hi + 1), char(2 * hi),
                          char(2 * hi + 1), char(2 * hi), char(2 * hi + 1), char(2 * hi), char(2 * hi + 1),
                          char(2 * hi), char(2 * hi + 1));
}

// Σ w·xq over one 32-element block as 8 int32 lanes, the weight bytes unsigned (≤ 63, so
// each maddubs pair is ≤ 2·63·127 < 2^15: no saturation) and `scale` the 16-bit
// multipliers folded into the madd.
inline __m256i block_dot(__m256i w, const int8_t* xq, __m256i scale) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, load32(xq)), scale);
}

// Q4_K (five = false) and Q5_K (five = true). Per super-block: Σ_j d·sc_j·x_j.d·Σ(q·xq)
// − dmin·Σ_j m_j·x_j.sum. The x.d factors go in per block through an f32 FMA into a
// super-block accumulator that is scaled by d once. N activation rows (x, x + xs, …) share
// each super-block's unpacked codes and scales; every row's sums are formed in the same
// order whatever N is.
template <bool five, int N>
void qdot_k45_avx2(const uint8_t* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out) {
  constexpr int64_t block_bytes = five ? q5_k_bytes : q4_k_bytes;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  static_assert(sizeof(ActQ8Block) % sizeof(float) == 0);
  constexpr int stride = int(sizeof(ActQ8Block) / sizeof(float));
  const __m256i sum_index = _mm256_setr_epi32(0, stride, 2 * stride, 3 * stride, 4 * stride, 5 * stride, 6 * stride, 7 * stride);
  __m256 acc[N];
  for (int r = 0; r < N; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < k / qk_k; ++sb, w += block_bytes, x += 8) {
    const uint8_t* qs = w + (five ? 48 : 16);
    uint64_t sc8, m8;
    unpack_scales(w + 4, &sc8, &m8);
    // Scales as 16-bit words, the same 8 in both lanes, for the per-block pshufb.
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(sc8))));
    const __m256 mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(m8))));
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(int(block_u32(w))));  // d, dmin
    __m256i qh = _mm256_setzero_si256();
    if constexpr (five) qh = load32(w + 16);
    __m256 sacc0[N], sacc1[N];
    for (int r = 0; r < N; ++r) sacc0[r] = sacc1[r] = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load32(qs + 32 * c);
      __m256i lo = _mm256_and_si256(q, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (five) {
        // Bit 2c of qh[l] is the fifth bit of sub-block 2c, bit 2c+1 of sub-block 2c+1;
        // move each to bit 4 (16-bit shifts: the mask drops what crosses a byte).
        const __m256i h0 = c < 2 ? _mm256_slli_epi16(qh, 4 - 2 * c) : _mm256_srli_epi16(qh, 2 * c - 4);
        const __m256i h1 = c < 2 ? _mm256_slli_epi16(qh, 3 - 2 * c) : _mm256_srli_epi16(qh, 2 * c - 3);
        lo = _mm256_or_si256(lo, _mm256_and_si256(h0, bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(h1, bit4));
      }
      const __m256i s0 = _mm256_shuffle_epi8(sc16, word_pick(2 * c, 2 * c));
      const __m256i s1 = _mm256_shuffle_epi8(sc16, word_pick(2 * c + 1, 2 * c + 1));
#pragma GCC unroll 4
      for (int r = 0; r < N; ++r) {
        const ActQ8Block* xr = x + r * xs;
        const __m256i p0 = block_dot(lo, xr[2 * c].q, s0);
        const __m256i p1 = block_dot(hi, xr[2 * c + 1].q, s1);
        sacc0[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_broadcast_ss(&xr[2 * c].d), sacc0[r]);
        sacc1[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_broadcast_ss(&xr[2 * c + 1].d), sacc1[r]);
      }
    }
    const __m256 dmins = _mm256_mul_ps(mins, _mm256_broadcastss_ps(_mm_movehdup_ps(dd)));
    for (int r = 0; r < N; ++r) {
      // The 8 blocks' x.sum (stride 40 bytes): one gather measured ~8% faster on the whole
      // kernel than 8 scalar loads and inserts, which crowd the shuffle port.
      const __m256 sums = _mm256_i32gather_ps(&x[r * xs].sum, sum_index, 4);
      acc[r] = _mm256_fmadd_ps(_mm256_add_ps(sacc0[r], sacc1[r]), _mm256_broadcastss_ps(dd), acc[r]);
      acc[r] = _mm256_fnmadd_ps(dmins, sums, acc[r]);
    }
  }
  for (int r = 0; r < N; ++r) out[r] = hsum8(acc[r]);
}

// Q6_K: per 128-element half, activation block j (0..3) takes the low (j < 2) or high
// nibbles of ql[32·(j&1) ..], bits 2j..2j+1 of qh on top, scales 2j / 2j+1 for its two
// 16-element halves (the low / high 128-bit lane). The −32 offset is taken off as
// 32·Σxq per pair before the madd: (q − 32)·xq pairs stay within ±2·32·127. N rows as above.
template <int N>
void qdot_q6_k_rows(const uint8_t* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  const __m256i c32 = _mm256_set1_epi8(32);
  __m256 acc[N];
  for (int r = 0; r < N; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < k / qk_k; ++sb, w += q6_k_bytes) {
    __m256 sacc0[N], sacc1[N];
    for (int r = 0; r < N; ++r) sacc0[r] = sacc1[r] = _mm256_setzero_ps();
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half, x += 4) {
      const uint8_t* ql = w + 64 * half;
      const __m256i qh = load32(w + 128 + 32 * half);
      const __m256i q0 = load32(ql), q1 = load32(ql + 32);
      // The half's 8 int8 scales as 16-bit words in both lanes.
      const __m256i sc16 = _mm256_broadcastsi128_si256(
          _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 192 + 8 * half))));
      const __m256i n[4] = {_mm256_and_si256(q0, low4), _mm256_and_si256(q1, low4),
                            _mm256_and_si256(_mm256_srli_epi16(q0, 4), low4),
                            _mm256_and_si256(_mm256_srli_epi16(q1, 4), low4)};
      const __m256i h[4] = {_mm256_slli_epi16(qh, 4), _mm256_slli_epi16(qh, 2), qh, _mm256_srli_epi16(qh, 2)};
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_or_si256(n[j], _mm256_and_si256(h[j], bits45));
        const __m256i scale = _mm256_shuffle_epi8(sc16, word_pick(2 * j, 2 * j + 1));
#pragma GCC unroll 4
        for (int r = 0; r < N; ++r) {
          const ActQ8Block& xj = x[r * xs + j];
          const __m256i xq = load32(xj.q);
          const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, xq), _mm256_maddubs_epi16(c32, xq));
          const __m256i s = _mm256_madd_epi16(p, scale);
          if (j & 1)
            sacc1[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_broadcast_ss(&xj.d), sacc1[r]);
          else
            sacc0[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_broadcast_ss(&xj.d), sacc0[r]);
        }
      }
    }
    const __m256 d = _mm256_set1_ps(half_at(w + 208));
    for (int r = 0; r < N; ++r) acc[r] = _mm256_fmadd_ps(_mm256_add_ps(sacc0[r], sacc1[r]), d, acc[r]);
  }
  for (int r = 0; r < N; ++r) out[r] = hsum8(acc[r]);
}

}  // namespace

float qdot_q4_k_avx2(const void* w, const ActQ8Block* x, int64_t k) {
  float out;
  qdot_k45_avx2<false, 1>(static_cast<const uint8_t*>(w), x, 0, k, &out);
  return out;
}

float qdot_q5_k_avx2(const void* w, const ActQ8Block* x, int64_t k) {
  float out;
  qdot_k45_avx2<true, 1>(static_cast<const uint8_t*>(w), x, 0, k, &out);
  return out;
}

float qdot_q6_k_avx2(const void* w, const ActQ8Block* x, int64_t k) {
  float out;
  qdot_q6_k_rows<1>(static_cast<const uint8_t*>(w), x, 0, k, &out);
  return out;
}

void qdot4_q4_k_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out) {
  qdot_k45_avx2<false, 4>(static_cast<const uint8_t*>(w), x, xs, k, out);
}

void qdot4_q5_k_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out) {
  qdot_k45_avx2<true, 4>(static_cast<const uint8_t*>(w), x, xs, k, out);
}

void qdot4_q6_k_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out) {
  qdot_q6_k_rows<4>(static_cast<const uint8_t*>(w), x, xs, k, out);
}

}  // namespace oscar::qmat
