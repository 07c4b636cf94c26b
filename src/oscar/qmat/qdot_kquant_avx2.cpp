// AVX2 dot products of one Q4_K / Q5_K / Q6_K weight row (k a multiple of 256) with its
// ActQ8KBlock activation row, or with four rows at once (qdot4: the same sums per row, the
// codes unpacked once): int32 sums over each whole super-block, then one f32 FMA per
// super-block. The integer sums equal qdot_kquant_ref.cpp's; only the f32 part differs.
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

// Two empty asm statements that steer GCC's scheduling (neither emits an instruction):
// - keep_in_register: GCC reassociates the four-row kernels' int32 sums (integer adds are
//   associative) into trees that hoist all 32 products of a super-block and spill them to
//   the stack; pinning each partial sum keeps the adds in program order (m = 64 measured
//   10-20% faster, most spills gone).
// - hide_from_optimizer: makes the compiler assume `v` was rewritten in memory, so reads
//   of it stay loads (a broadcast from memory needs no shuffle port) instead of being
//   forwarded from the register that was stored through shuffles.
inline void keep_in_register(__m256i& v) { asm("" : "+x"(v)); }
template <class T>
inline void hide_from_optimizer(T& v) {
  asm("" : "+m"(v));
}

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

// Q4_K (five = false) and Q5_K (five = true). Per super-block, all in int32:
//   isum = Σ_j sc_j·Σ_l q[32j + l]·xq[32j + l]   (maddubs: unsigned codes × int8 x, then
//          madd with sc_j as the 16-bit multiplier)
//   msum = Σ_j m_j·(bsums[2j] + bsums[2j + 1])  (one madd, each min repeated twice)
// then acc += (d·x.d)·isum − (dmin·x.d)·msum in f32: isum's and msum's lanes paired by one
// hadd, one conversion, one FMA.
// Bounds: a maddubs pair is ≤ 2·31·127 = 7874 < 2^15 (no saturation); each isum lane
// takes 4 elements of each of the 8 sub-blocks, ≤ 32·63·31·127 < 2^23, and each msum lane
// ≤ 2·63·2032 < 2^18, so both are exact in int32, and so are the sums of two lanes (< 2^24)
// in their f32 conversion.
// N activation rows (x, x + xs, …) share each super-block's unpacked codes and scales;
// every row's sums are formed in the same order whatever N is.
template <bool five, int N>
void qdot_k45_avx2(const uint8_t* w, const ActQ8KBlock* x, int64_t xs, int64_t k, float* out) {
  constexpr int64_t block_bytes = five ? q5_k_bytes : q4_k_bytes;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  __m256 acc[N];
  for (int r = 0; r < N; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < k / qk_k; ++sb, w += block_bytes, ++x) {
    const uint8_t* qs = w + (five ? 48 : 16);
    uint64_t sc8, m8;
    unpack_scales(w + 4, &sc8, &m8);
    // Sub-block j's scale as the dword sc_j·0x10001 (both words the madd multiplier), kept
    // in memory: a dword broadcast from memory is a plain load, where a pshufb per sub-block
    // loads the shuffle port, the one-row kernel's busiest (Q4_K m = 1 on an L2-resident
    // 1536 × 1536 matrix: 37 → 55 GFLOP/s).
    alignas(32) uint32_t sc32[8];
    const __m256i sc_d = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(sc8)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc32), _mm256_or_si256(sc_d, _mm256_slli_epi32(sc_d, 16)));
    hide_from_optimizer(sc32);
    // Mins as 16-bit words m0 m0 m1 m1 … m7 m7, against the 16 bsums.
    const __m128i m8v = _mm_cvtsi64_si128(int64_t(m8));
    const __m256i mins2 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8v, m8v));
    const float d = half_at(w), dmin = half_at(w + 2);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (five) qh = load32(w + 16);
    __m256i isum[N];
    for (int r = 0; r < N; ++r) isum[r] = _mm256_setzero_si256();
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
      const __m256i s0 = _mm256_set1_epi32(int(sc32[2 * c]));
      const __m256i s1 = _mm256_set1_epi32(int(sc32[2 * c + 1]));
#pragma GCC unroll 4
      for (int r = 0; r < N; ++r) {
        const int8_t* xq = x[r * xs].q + 64 * c;
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(xq)), s0);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(xq + 32)), s1);
        isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(p0, p1));
        keep_in_register(isum[r]);
      }
    }
    // One conversion and one FMA per row: hadd pairs isum's lanes into lanes 0-1 / 4-5 and
    // msum's into 2-3 / 6-7, which meet d and −dmin there. Two conversions, two FMAs and two
    // scalar products per row before (the vector ALU ports bound this kernel; hadd uses the
    // shuffle port): about 3 % on the four-row kernel, L1-resident, alternating runs.
    const __m256 dd = _mm256_setr_ps(d, d, -dmin, -dmin, d, d, -dmin, -dmin);
    for (int r = 0; r < N; ++r) {
      const ActQ8KBlock& xr = x[r * xs];
      const __m256i msum = _mm256_madd_epi16(mins2, load32(xr.bsums));
      const __m256 sums = _mm256_cvtepi32_ps(_mm256_hadd_epi32(isum[r], msum));
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dd, _mm256_broadcast_ss(&xr.d)), sums, acc[r]);
    }
  }
  for (int r = 0; r < N; ++r) out[r] = hsum8(acc[r]);
}

// Q6_K: per 128-element half, 32-element run j (0..3) takes the low (j < 2) or high
// nibbles of ql[32·(j&1) ..], bits 2j..2j+1 of qh on top, scales 2j / 2j+1 for its two
// 16-element groups (the low / high 128-bit lane). The codes stay unsigned (0..63) for
// maddubs and the −32 comes off once per super-block: Σ sc_g·(q − 32)·x = Σ sc_g·q·x −
// 32·Σ_g sc_g·bsums[g], where group g of the activations is scale g's group (both count
// 16 elements in order). Bounds: a maddubs pair is ≤ 2·63·127 = 16002 < 2^15; each isum
// lane takes 32 elements, ≤ 32·63·127·128 < 2^25, and the offset lane 32·2·128·2032
// < 2^25, so the difference stays far inside int32 (its f32 conversion may round a lane
// past 2^24 by at most 2 units, the same way for every N).
template <int N>
void qdot_q6_k_rows(const uint8_t* w, const ActQ8KBlock* x, int64_t xs, int64_t k, float* out) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  __m256 acc[N];
  for (int r = 0; r < N; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < k / qk_k; ++sb, w += q6_k_bytes, ++x) {
    __m256i isum[N];
    for (int r = 0; r < N; ++r) isum[r] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
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
          const __m256i xq = load32(x[r * xs].q + 128 * half + 32 * j);
          isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q, xq), scale));
          keep_in_register(isum[r]);
        }
      }
    }
    // All 16 scales as 16-bit words, against the 16 bsums.
    const __m256i sc_all = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192)));
    const float d = half_at(w + 208);
    for (int r = 0; r < N; ++r) {
      const ActQ8KBlock& xr = x[r * xs];
      const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(sc_all, load32(xr.bsums)), 5);
      const __m256i s = _mm256_sub_epi32(isum[r], offset);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * xr.d), _mm256_cvtepi32_ps(s), acc[r]);
    }
  }
  for (int r = 0; r < N; ++r) out[r] = hsum8(acc[r]);
}

}  // namespace

float qdot_q4_k_avx2(const void* w, const ActQ8KBlock* x, int64_t k) {
  float out;
  qdot_k45_avx2<false, 1>(static_cast<const uint8_t*>(w), x, 0, k, &out);
  return out;
}

float qdot_q5_k_avx2(const void* w, const ActQ8KBlock* x, int64_t k) {
  float out;
  qdot_k45_avx2<true, 1>(static_cast<const uint8_t*>(w), x, 0, k, &out);
  return out;
}

float qdot_q6_k_avx2(const void* w, const ActQ8KBlock* x, int64_t k) {
  float out;
  qdot_q6_k_rows<1>(static_cast<const uint8_t*>(w), x, 0, k, &out);
  return out;
}

void qdot4_q4_k_avx2(const void* w, const ActQ8KBlock* x, int64_t xs, int64_t k, float* out) {
  qdot_k45_avx2<false, 4>(static_cast<const uint8_t*>(w), x, xs, k, out);
}

void qdot4_q5_k_avx2(const void* w, const ActQ8KBlock* x, int64_t xs, int64_t k, float* out) {
  qdot_k45_avx2<true, 4>(static_cast<const uint8_t*>(w), x, xs, k, out);
}

void qdot4_q6_k_avx2(const void* w, const ActQ8KBlock* x, int64_t xs, int64_t k, float* out) {
  qdot_q6_k_rows<4>(static_cast<const uint8_t*>(w), x, xs, k, out);
}

}  // namespace oscar::qmat
