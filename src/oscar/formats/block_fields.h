// Reading the fields of ggml's quantized blocks, shared by the dequantizers (formats/) and
// the integer dot kernels (qmat/): unaligned little-endian loads, and the packed 6-bit
// scales and mins of Q4_K / Q5_K.
#pragma once
#include <cstdint>
#include <cstring>

#include "oscar/core/dtype.h"

namespace oscar {

inline float block_half(const uint8_t* p) {  // an fp16 field
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return fp16_to_f32(fp16{bits});
}

inline uint32_t block_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The 12 scale bytes of Q4_K/Q5_K hold eight 6-bit scales and eight 6-bit mins:
// bytes 0-3 / 4-7 carry scales / mins 0-3 in their low 6 bits; scales / mins 4-7 take
// their low 4 bits from bytes 8-11 (low / high nibble) and their top 2 bits from the
// top bits of bytes 0-3 / 4-7.
inline void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace oscar
