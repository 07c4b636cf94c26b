// Scalar dequantization of the ggml block formats into f32. Block layouts follow ggml's
// block_q* structs (all little-endian, fp16 scales); the arithmetic order matches ggml's
// reference dequantize_row_* so results agree with it (and with gguf-py) to the bit.
#include <cstring>

#include "oscar/core/dtype.h"
#include "oscar/core/error.h"
#include "oscar/formats/block_fields.h"
#include "oscar/formats/ggml_type.h"

namespace oscar {
namespace {

constexpr int qk = 32;     // block size of the legacy quants
constexpr int qk_k = 256;  // super-block size of the K-quants

// Q4_0: d:f16, qs[16]; element j is the low nibble of qs[j], element j+16 the high one.
void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = block_half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < qk / 2; ++j) {
    y[j] = float(int(qs[j] & 0x0f) - 8) * d;
    y[j + qk / 2] = float(int(qs[j] >> 4) - 8) * d;
  }
}

// Q4_1: d:f16, m:f16, qs[16]; x = q*d + m.
void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = block_half(b);
  const float m = block_half(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < qk / 2; ++j) {
    y[j] = float(qs[j] & 0x0f) * d + m;
    y[j + qk / 2] = float(qs[j] >> 4) * d + m;
  }
}

// Q5_0: d:f16, qh:u32 (bit j = fifth bit of element j), qs[16] low nibbles.
void dequant_q5_0(const uint8_t* b, float* y) {
  const float d = block_half(b);
  const uint32_t qh = block_u32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < qk / 2; ++j) {
    const int h0 = int((qh >> j) & 1u) << 4;
    const int h1 = int((qh >> (j + 16)) & 1u) << 4;
    y[j] = float(((qs[j] & 0x0f) | h0) - 16) * d;
    y[j + qk / 2] = float(((qs[j] >> 4) | h1) - 16) * d;
  }
}

// Q5_1: d:f16, m:f16, qh:u32, qs[16]; x = q*d + m.
void dequant_q5_1(const uint8_t* b, float* y) {
  const float d = block_half(b);
  const float m = block_half(b + 2);
  const uint32_t qh = block_u32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < qk / 2; ++j) {
    const int h0 = int((qh >> j) & 1u) << 4;
    const int h1 = int((qh >> (j + 16)) & 1u) << 4;
    y[j] = float((qs[j] & 0x0f) | h0) * d + m;
    y[j + qk / 2] = float((qs[j] >> 4) | h1) * d + m;
  }
}

// Q8_0: d:f16, qs[32] int8.
void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = block_half(b);
  for (int j = 0; j < qk; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}

// Q4_K: d:f16, dmin:f16, scales[12], qs[128]. Each 64-element chunk uses one 32-byte run
// of qs: low nibbles for its first 32 elements, high nibbles for the next 32.
void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = block_half(b);
  const float dmin = block_half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
    uint8_t sc, m;
    k4_scale_min(is, scales, &sc, &m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    k4_scale_min(is + 1, scales, &sc, &m);
    const float d2 = d * float(sc), m2 = dmin * float(m);
    for (int l = 0; l < 32; ++l) y[l] = d1 * float(q[l] & 0x0f) - m1;
    for (int l = 0; l < 32; ++l) y[l + 32] = d2 * float(q[l] >> 4) - m2;
  }
}

// Q5_K: d:f16, dmin:f16, scales[12], qh[32], qs[128]. As Q4_K, plus a fifth bit from
// qh: chunk c (of 8 sub-blocks of 32) takes bit c of qh[l].
void dequant_q5_k(const uint8_t* b, float* y) {
  const float d = block_half(b);
  const float dmin = block_half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  for (int is = 0; is < 8; is += 2, ql += 32, y += 64) {
    uint8_t sc, m;
    k4_scale_min(is, scales, &sc, &m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    k4_scale_min(is + 1, scales, &sc, &m);
    const float d2 = d * float(sc), m2 = dmin * float(m);
    const uint8_t u1 = uint8_t(1u << is), u2 = uint8_t(2u << is);
    for (int l = 0; l < 32; ++l) y[l] = d1 * float((ql[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) y[l + 32] = d2 * float((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
  }
}

// Q6_K: ql[128] low nibbles, qh[64] 2-bit high parts, scales[16] int8, d:f16.
// Each 128-element half uses 64 bytes of ql, 32 of qh and 8 scales (one per 16 elements).
void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + qk_k / 2;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + qk_k / 2 + qk_k / 4);
  const float d = block_half(b + qk_k / 2 + qk_k / 4 + qk_k / 16);
  for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = int((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
      const int q2 = int((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
      const int q3 = int((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
      const int q4 = int((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
      y[l] = d * float(sc[is + 0]) * float(q1);
      y[l + 32] = d * float(sc[is + 2]) * float(q2);
      y[l + 64] = d * float(sc[is + 4]) * float(q3);
      y[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(GgmlType t) {
  switch (t) {
    case GgmlType::q4_0: return dequant_q4_0;
    case GgmlType::q4_1: return dequant_q4_1;
    case GgmlType::q5_0: return dequant_q5_0;
    case GgmlType::q5_1: return dequant_q5_1;
    case GgmlType::q8_0: return dequant_q8_0;
    case GgmlType::q4_k: return dequant_q4_k;
    case GgmlType::q5_k: return dequant_q5_k;
    case GgmlType::q6_k: return dequant_q6_k;
    default: return nullptr;
  }
}

}  // namespace

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  if (!ggml_type_dequantizable(t)) fail("cannot dequantize tensors of type {}", ggml_type_name(t));
  ggml_row_bytes(t, n);  // validates that n is a whole number of blocks
  const auto* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case GgmlType::f32:
      std::memcpy(dst, p, size_t(n) * 4);
      return;
    case GgmlType::f16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, p + 2 * i, 2);
        dst[i] = fp16_to_f32(fp16{bits});
      }
      return;
    case GgmlType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, p + 2 * i, 2);
        dst[i] = bf16_to_f32(bf16{bits});
      }
      return;
    default:
      break;
  }
  const BlockFn fn = block_fn(t);
  const int64_t be = ggml_block_elements(t);
  const int64_t bb = ggml_block_bytes(t);
  for (int64_t i = 0; i < n / be; ++i) fn(p + i * bb, dst + i * be);
}

}  // namespace oscar
