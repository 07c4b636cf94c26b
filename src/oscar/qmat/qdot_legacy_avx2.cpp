// AVX2 legacy-quant dot products (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against 8-bit activations:
// per block, 32 weight codes in one __m256i, byte products summed to 8 exact int32 lanes,
// then one FMA by d_w·d_x into an f32 accumulator; one horizontal sum per row. The
// four-row kernels (qdot4) unpack each weight block once for four activation rows.
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "oscar/ops/avx2_util.h"
#include "oscar/qmat/qdot.h"

namespace oscar::qmat {
namespace {

// 16 bytes of packed nibbles → 32 bytes 0..15: low nibbles to bytes 0–15, high to 16–31
// (the legacy order: element j is the low nibble of qs[j], element j+16 the high one).
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// Bit j of the 32-bit qh (at p) → byte j = 0xff when set, 0 otherwise.
inline __m256i spread_bits(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  // Byte j takes qh's byte j/8, then keeps only bit j%8.
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(int(qh)), pick);
  return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

// Σ over byte pairs of u·s (u unsigned ≤ 128, s signed), as 8 int32 lanes of 4 products each.
// maddubs cannot saturate here: 2·128·127 < 32767.
inline __m256i dot_u8_i8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Signed × signed: maddubs wants its first operand unsigned, so move w's sign onto x.
// |w| as unsigned is right even for w = −128; x is never −128, so sign(x, w) cannot overflow.
inline __m256i dot_i8_i8(__m256i w, __m256i x) {
  return dot_u8_i8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

// Σ (u − offset)·s for unsigned codes u: Σ u·s − offset·Σ s, both in exact int16 pairs
// (≤ 2·31·127 and 2·16·127). Cheaper than subtracting first and taking the sign trick.
inline __m256i dot_offset(__m256i u, int8_t offset, __m256i s) {
  const __m256i us = _mm256_maddubs_epi16(u, s);
  const __m256i os = _mm256_maddubs_epi16(_mm256_set1_epi8(offset), s);
  return _mm256_madd_epi16(_mm256_sub_epi16(us, os), _mm256_set1_epi16(1));
}

inline __m256i load_act(const ActQ8Block& x) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q)); }

// Block codes of each format, and whether it carries a minimum (an f16 right after d):
// codes() unpacks a block's 32 weights once, dot() takes them against one activation block.
struct Q4_0 {
  static constexpr int bytes = 18;
  static constexpr bool has_min = false;
  static __m256i codes(const uint8_t* b) { return unpack_nibbles(b + 2); }
  static __m256i dot(__m256i w, const ActQ8Block& x) { return dot_offset(w, 8, load_act(x)); }
};
struct Q4_1 {
  static constexpr int bytes = 20;
  static constexpr bool has_min = true;
  static __m256i codes(const uint8_t* b) { return unpack_nibbles(b + 4); }
  static __m256i dot(__m256i w, const ActQ8Block& x) { return dot_u8_i8(w, load_act(x)); }
};
struct Q5_0 {
  static constexpr int bytes = 22;
  static constexpr bool has_min = false;
  static __m256i codes(const uint8_t* b) {
    return _mm256_or_si256(unpack_nibbles(b + 6), _mm256_and_si256(spread_bits(b + 2), _mm256_set1_epi8(0x10)));
  }
  static __m256i dot(__m256i w, const ActQ8Block& x) { return dot_offset(w, 16, load_act(x)); }
};
struct Q5_1 {
  static constexpr int bytes = 24;
  static constexpr bool has_min = true;
  static __m256i codes(const uint8_t* b) {
    return _mm256_or_si256(unpack_nibbles(b + 8), _mm256_and_si256(spread_bits(b + 4), _mm256_set1_epi8(0x10)));
  }
  static __m256i dot(__m256i w, const ActQ8Block& x) { return dot_u8_i8(w, load_act(x)); }
};
struct Q8_0 {
  static constexpr int bytes = 34;
  static constexpr bool has_min = false;
  static __m256i codes(const uint8_t* b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)); }
  static __m256i dot(__m256i w, const ActQ8Block& x) { return dot_i8_i8(w, load_act(x)); }
};

// The block's f16 pair (d, m) as [d_w, m_w, 0, 0]; formats without a minimum read d alone.
template <typename F>
inline __m128 weight_scales(const uint8_t* b) {
  uint32_t h = 0;
  std::memcpy(&h, b, F::has_min ? 4 : 2);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(int(h)));
}

// acc += d_w·d_x · (8 int32 lane sums); lane 1 of `mins` collects m_w·sum_x (lane 0 is
// the scale, summed there too and ignored). w: the block's codes, wd: its scales.
template <typename F>
inline __m256 block_step(__m256i w, __m128 wd, const ActQ8Block& x, __m256 acc, __m128& mins) {
  static_assert(offsetof(ActQ8Block, sum) == offsetof(ActQ8Block, d) + 4);
  const __m128 a = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&x.d)));
  const __m128 s = _mm_mul_ps(wd, a);  // [d_w·d_x, m_w·sum_x, 0, 0]
  if constexpr (F::has_min) mins = _mm_add_ps(mins, s);
  return _mm256_fmadd_ps(_mm256_broadcastss_ps(s), _mm256_cvtepi32_ps(F::dot(w, x)), acc);
}

// N activation rows (x, x + xs, …) against one weight row, each block's codes unpacked
// once for all N. Two blocks per iteration into two accumulators per row, so consecutive
// FMAs don't wait on each other; every row's sums are formed in the same order whatever
// N is, so a row's result does not depend on the rows beside it.
template <typename F, int N>
void qdot_rows(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out) {
  const auto* b = static_cast<const uint8_t*>(w);
  const int64_t nb = k / act_block;
  __m256 acc0[N], acc1[N];
  __m128 mins0[N], mins1[N];
  for (int r = 0; r < N; ++r) {
    acc0[r] = acc1[r] = _mm256_setzero_ps();
    mins0[r] = mins1[r] = _mm_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2, b += 2 * F::bytes) {
    const __m256i w0 = F::codes(b), w1 = F::codes(b + F::bytes);
    const __m128 wd0 = weight_scales<F>(b), wd1 = weight_scales<F>(b + F::bytes);
#pragma GCC unroll 4
    for (int r = 0; r < N; ++r) {
      acc0[r] = block_step<F>(w0, wd0, x[r * xs + i], acc0[r], mins0[r]);
      acc1[r] = block_step<F>(w1, wd1, x[r * xs + i + 1], acc1[r], mins1[r]);
    }
  }
  if (i < nb) {
    const __m256i w0 = F::codes(b);
    const __m128 wd0 = weight_scales<F>(b);
    for (int r = 0; r < N; ++r) acc0[r] = block_step<F>(w0, wd0, x[r * xs + i], acc0[r], mins0[r]);
  }
  for (int r = 0; r < N; ++r) {
    out[r] = hsum8(_mm256_add_ps(acc0[r], acc1[r]));
    if constexpr (F::has_min) out[r] += _mm_cvtss_f32(_mm_movehdup_ps(_mm_add_ps(mins0[r], mins1[r])));
  }
}

template <typename F>
float qdot_row(const void* w, const ActQ8Block* x, int64_t k) {
  float out;
  qdot_rows<F, 1>(w, x, 0, k, &out);
  return out;
}

}  // namespace

float qdot_q4_0_avx2(const void* w, const ActQ8Block* x, int64_t k) { return qdot_row<Q4_0>(w, x, k); }
float qdot_q4_1_avx2(const void* w, const ActQ8Block* x, int64_t k) { return qdot_row<Q4_1>(w, x, k); }
float qdot_q5_0_avx2(const void* w, const ActQ8Block* x, int64_t k) { return qdot_row<Q5_0>(w, x, k); }
float qdot_q5_1_avx2(const void* w, const ActQ8Block* x, int64_t k) { return qdot_row<Q5_1>(w, x, k); }
float qdot_q8_0_avx2(const void* w, const ActQ8Block* x, int64_t k) { return qdot_row<Q8_0>(w, x, k); }

void qdot4_q4_0_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out) {
  qdot_rows<Q4_0, 4>(w, x, xs, k, out);
}
void qdot4_q4_1_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out) {
  qdot_rows<Q4_1, 4>(w, x, xs, k, out);
}
void qdot4_q5_0_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out) {
  qdot_rows<Q5_0, 4>(w, x, xs, k, out);
}
void qdot4_q5_1_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out) {
  qdot_rows<Q5_1, 4>(w, x, xs, k, out);
}
void qdot4_q8_0_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out) {
  qdot_rows<Q8_0, 4>(w, x, xs, k, out);
}

}  // namespace oscar::qmat
