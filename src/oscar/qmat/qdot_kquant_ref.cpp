// Scalar reference dot products of one Q4_K / Q5_K / Q6_K weight row (k a multiple of 256)
// with its ActQ8KBlock activation row: exact integer sums over each 256-element super-block
// (the bounds below keep them inside int32), then d_w·d_x (an f32 product, as the AVX2
// kernels form it) times those sums in double, summed over the super-blocks in double.
// Written from the formats, not from the AVX2 kernels' identities: the codes are taken
// signed (Q6_K's −32 applied per element) and the activation sums recounted from q rather
// than read from bsums.
#include "oscar/formats/block_fields.h"
#include "oscar/qmat/qdot.h"

namespace oscar::qmat {
namespace {

constexpr int64_t qk_k = 256;        // elements per K-quant super-block
constexpr int64_t q4_k_bytes = 144;  // d, dmin, scales[12], qs[128]
constexpr int64_t q5_k_bytes = 176;  // d, dmin, scales[12], qh[32], qs[128]
constexpr int64_t q6_k_bytes = 210;  // ql[128], qh[64], scales[16], d

// Q4_K and Q5_K differ only in the fifth bit (qh == nullptr for Q4_K). Sub-block j
// (elements 32j .. 32j + 31) reads the low (j even) or high (j odd) nibbles of
// qs[32·(j/2) ..][0..32). Per super-block |Σ sc·q·x| ≤ 256·63·31·127 < 2^26 and
// |Σ m·x| ≤ 256·63·127 < 2^22.
float qdot_k45(const uint8_t* w, const ActQ8KBlock* x, int64_t k, bool five) {
  const int64_t block_bytes = five ? q5_k_bytes : q4_k_bytes;
  double sum = 0.0;
  for (int64_t sb = 0; sb < k / qk_k; ++sb, w += block_bytes, ++x) {
    const float d = block_half(w);
    const float dmin = block_half(w + 2);
    const uint8_t* scales = w + 4;
    const uint8_t* qh = five ? w + 16 : nullptr;
    const uint8_t* qs = w + (five ? 48 : 16);
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      const uint8_t* q = qs + 32 * (j / 2);
      const int8_t* xq = x->q + 32 * j;
      const int shift = 4 * (j & 1);
      int32_t dot = 0, xsum = 0;
      for (int l = 0; l < 32; ++l) {
        int v = (q[l] >> shift) & 0x0f;
        if (qh) v |= ((qh[l] >> j) & 1) << 4;
        dot += v * xq[l];
        xsum += xq[l];
      }
      uint8_t sc, m;
      k4_scale_min(j, scales, &sc, &m);
      isum += int32_t(sc) * dot;
      msum += int32_t(m) * xsum;
    }
    sum += double(d * x->d) * double(isum) - double(dmin * x->d) * double(msum);
  }
  return float(sum);
}

}  // namespace

float qdot_q4_k_ref(const void* w, const ActQ8KBlock* x, int64_t k) {
  return qdot_k45(static_cast<const uint8_t*>(w), x, k, false);
}

float qdot_q5_k_ref(const void* w, const ActQ8KBlock* x, int64_t k) {
  return qdot_k45(static_cast<const uint8_t*>(w), x, k, true);
}

// Q6_K: each 128-element half of a super-block takes 64 bytes of ql, 32 of qh and 8
// scales. Its 32-element run j (0..3) reads ql[32·(j&1) + l]'s low (j < 2) or high
// nibble, bits 2j..2j+1 of qh[l] on top, minus 32, and scales 2j (l < 16) and 2j+1
// (l ≥ 16). Per super-block |Σ sc·(q − 32)·x| ≤ 256·128·32·127 < 2^28.
float qdot_q6_k_ref(const void* wv, const ActQ8KBlock* x, int64_t k) {
  const auto* w = static_cast<const uint8_t*>(wv);
  double sum = 0.0;
  for (int64_t sb = 0; sb < k / qk_k; ++sb, w += q6_k_bytes, ++x) {
    const float d = block_half(w + 208);
    int32_t isum = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = w + 64 * half;
      const uint8_t* qh = w + 128 + 32 * half;
      const auto* sc = reinterpret_cast<const int8_t*>(w + 192 + 8 * half);
      for (int j = 0; j < 4; ++j) {
        const uint8_t* q = ql + 32 * (j & 1);
        const int8_t* xq = x->q + 128 * half + 32 * j;
        const int shift = 4 * (j >> 1);
        for (int g = 0; g < 2; ++g) {  // two 16-element groups, one scale each
          int32_t part = 0;
          for (int l = 16 * g; l < 16 * g + 16; ++l) {
            const int v = (((q[l] >> shift) & 0x0f) | (((qh[l] >> (2 * j)) & 3) << 4)) - 32;
            part += v * xq[l];
          }
          isum += sc[2 * j + g] * part;
        }
      }
    }
    sum += double(d * x->d) * double(isum);
  }
  return float(sum);
}

}  // namespace oscar::qmat
