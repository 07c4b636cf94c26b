// Scalar conversions between float and the 16-bit storage types (bf16, fp16).
// These are the references that the vectorized conversions are tested against.
#pragma once
#include <cstdint>
#include <cstring>

namespace oscar {

struct bf16 { uint16_t bits; };
struct fp16 { uint16_t bits; };

inline float bf16_to_f32(bf16 x) {
  uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet).
inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

float fp16_to_f32(fp16 h);
fp16 f32_to_fp16(float f);  // round to nearest even, overflow to inf

}  // namespace oscar
