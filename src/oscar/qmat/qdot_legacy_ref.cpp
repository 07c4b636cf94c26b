// Scalar references for the legacy-quant dot products (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0):
// an exact integer sum inside each block of 32, then d_w·d_x·Σ (+ m_w·sum_x) in f32.
// Block layouts are ggml's block_q* (see formats/dequantize.cpp), read byte by byte.
#include "oscar/formats/block_fields.h"
#include "oscar/qmat/qdot.h"

namespace oscar::qmat {
namespace {

constexpr int half_block = act_block / 2;

// Σ w[i]·x.q[i] for 4-bit codes in qs (element j: low nibble of qs[j], j+16: high
// nibble), optional fifth bits from qh (bit j for element j), minus `offset`.
int isum_nibbles(const uint8_t* qs, uint32_t qh, int offset, const int8_t* xq) {
  int s = 0;
  for (int j = 0; j < half_block; ++j) {
    const int lo = int(qs[j] & 0x0f) | int((qh >> j) & 1u) << 4;
    const int hi = int(qs[j] >> 4) | int((qh >> (j + half_block)) & 1u) << 4;
    s += (lo - offset) * xq[j] + (hi - offset) * xq[j + half_block];
  }
  return s;
}

}  // namespace

// Q4_0: d:f16, qs[16]; w = (q − 8)·d.
float qdot_q4_0_ref(const void* w, const ActQ8Block* x, int64_t k) {
  const auto* b = static_cast<const uint8_t*>(w);
  float acc = 0.0f;
  for (int64_t i = 0; i < k / act_block; ++i, b += 18) {
    const int s = isum_nibbles(b + 2, 0, 8, x[i].q);
    acc += block_half(b) * x[i].d * float(s);
  }
  return acc;
}

// Q4_1: d:f16, m:f16, qs[16]; w = q·d + m, so Σ w·x = d·d_x·Σ q·x_q + m·sum_x.
float qdot_q4_1_ref(const void* w, const ActQ8Block* x, int64_t k) {
  const auto* b = static_cast<const uint8_t*>(w);
  float acc = 0.0f;
  for (int64_t i = 0; i < k / act_block; ++i, b += 20) {
    const int s = isum_nibbles(b + 4, 0, 0, x[i].q);
    acc += block_half(b) * x[i].d * float(s) + block_half(b + 2) * x[i].sum;
  }
  return acc;
}

// Q5_0: d:f16, qh:u32, qs[16]; w = (q − 16)·d.
float qdot_q5_0_ref(const void* w, const ActQ8Block* x, int64_t k) {
  const auto* b = static_cast<const uint8_t*>(w);
  float acc = 0.0f;
  for (int64_t i = 0; i < k / act_block; ++i, b += 22) {
    const int s = isum_nibbles(b + 6, block_u32(b + 2), 16, x[i].q);
    acc += block_half(b) * x[i].d * float(s);
  }
  return acc;
}

// Q5_1: d:f16, m:f16, qh:u32, qs[16]; w = q·d + m.
float qdot_q5_1_ref(const void* w, const ActQ8Block* x, int64_t k) {
  const auto* b = static_cast<const uint8_t*>(w);
  float acc = 0.0f;
  for (int64_t i = 0; i < k / act_block; ++i, b += 24) {
    const int s = isum_nibbles(b + 8, block_u32(b + 4), 0, x[i].q);
    acc += block_half(b) * x[i].d * float(s) + block_half(b + 2) * x[i].sum;
  }
  return acc;
}

// Q8_0: d:f16, qs[32] int8; w = q·d.
float qdot_q8_0_ref(const void* w, const ActQ8Block* x, int64_t k) {
  const auto* b = static_cast<const uint8_t*>(w);
  float acc = 0.0f;
  for (int64_t i = 0; i < k / act_block; ++i, b += 34) {
    int s = 0;
    for (int j = 0; j < act_block; ++j) s += int(int8_t(b[2 + j])) * x[i].q[j];
    acc += block_half(b) * x[i].d * float(s);
  }
  return acc;
}

}  // namespace oscar::qmat
