// KIVI-2 baseline codec (Liu et al., 2024): keys quantized per channel over a block of T
// tokens (each of the d channels gets its own scale/zero over those T values), values per
// token (the plain uniform codec, quantize_row with clip 0). No clipping, no rotation.
//
// Key block layout (little-endian), kivi_key_block_bytes(p) bytes:
//   [codes: T rows × d·bits/8 bytes; row t packed as one packing group of d dims
//    (pack_codes(bits, d, …), the reference's quarter layout at 2 bits)]
//   [params: d × {fp16 scale, fp16 zero}, channel c at 4·c]
// A partial block (fewer than T tokens) is never quantized: the cache keeps those tokens,
// plus KIVI's residual window, in full precision (see docs/kv-layout.md).
#pragma once
#include <cstddef>
#include <cstdint>

#include "oscar/kv/quant_codec.h"

namespace oscar {

struct KiviKeyParams {
  int bits = 2;           // 2, 4 or 8
  int head_dim = 128;     // d: a power of two in [32, 1024]
  int block_tokens = 32;  // T: tokens per per-channel group, >= 1
};

void kivi_key_params_check(const KiviKeyParams& p);  // throws oscar::Error naming the field

inline size_t kivi_key_row_code_bytes(const KiviKeyParams& p) { return size_t(p.head_dim) * size_t(p.bits) / 8; }
inline size_t kivi_key_block_bytes(const KiviKeyParams& p) {
  return size_t(p.block_tokens) * kivi_key_row_code_bytes(p) + size_t(p.head_dim) * 4;
}
// Keys: bits + 32/T. Both K and V (values per token in groups of G along d): the mean,
// bits + 16/T + 16/G. Neither counts the full-precision residual window.
double kivi_key_bits_per_element(const KiviKeyParams& p);
double kivi_bits_per_element(const KiviKeyParams& p, int value_group);

// k: [T, d] f32 row-major → out: [kivi_key_block_bytes(p)].
void kivi_quantize_key_block(const KiviKeyParams& p, const float* k, uint8_t* out);
// in → k: [T, d] f32.
void kivi_dequantize_key_block(const KiviKeyParams& p, const uint8_t* in, float* k);
// Row t of a block only (the same values as the block version gives for that row).
void kivi_dequantize_key_row(const KiviKeyParams& p, const uint8_t* in, int t, float* k);

// scores[t] = q · k̂_t for the T tokens of a block. The fast path folds the channel scales
// into the query once per block: q·k̂_t = Σ_c (q_c·s_c)·code_tc − Σ_c q_c·s_c·z_c.
void kivi_dot_key_block_ref(const KiviKeyParams& p, const float* q, const uint8_t* block, float* scores);
void kivi_dot_key_block(const KiviKeyParams& p, const float* q, const uint8_t* block, float* scores);

}  // namespace oscar
