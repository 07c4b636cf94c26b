// KIVI key blocks: per-channel asymmetric quantization over T tokens.
#include "oscar/kv/kivi_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "oscar/core/error.h"

namespace oscar {
namespace {

QuantGroupParams load_channel(const KiviKeyParams& p, const uint8_t* block, int c) {
  QuantGroupParams gp;
  std::memcpy(&gp, block + size_t(p.block_tokens) * kivi_key_row_code_bytes(p) + size_t(c) * 4, 4);
  return gp;
}

}  // namespace

void kivi_key_params_check(const KiviKeyParams& p) {
  if (p.bits != 2 && p.bits != 4 && p.bits != 8) fail("kivi: bits {} not supported (2, 4 or 8)", p.bits);
  if (p.head_dim < 32 || p.head_dim > kQuantMaxHeadDim || (p.head_dim & (p.head_dim - 1)) != 0)
    fail("kivi: head_dim {} not supported (a power of two in [32, {}])", p.head_dim, kQuantMaxHeadDim);
  if (p.block_tokens < 1) fail("kivi: block_tokens {} must be >= 1", p.block_tokens);
}

double kivi_key_bits_per_element(const KiviKeyParams& p) { return p.bits + 32.0 / p.block_tokens; }

double kivi_bits_per_element(const KiviKeyParams& p, int value_group) {
  return p.bits + 16.0 / p.block_tokens + 16.0 / value_group;
}

void kivi_quantize_key_block(const KiviKeyParams& p, const float* k, uint8_t* out) {
  kivi_key_params_check(p);
  const int T = p.block_tokens, d = p.head_dim, L = quant_levels(p.bits);
  const size_t row_bytes = kivi_key_row_code_bytes(p);
  std::vector<float> s(static_cast<size_t>(d)), z(static_cast<size_t>(d));
  uint8_t* params = out + size_t(T) * row_bytes;
  for (int c = 0; c < d; ++c) {
    float lo = INFINITY, hi = -INFINITY;
    for (int t = 0; t < T; ++t) {
      lo = std::min(lo, k[size_t(t) * d + c]);
      hi = std::max(hi, k[size_t(t) * d + c]);
    }
    const QuantGroupParams gp = uniform_group_params(lo, hi, p.bits);
    std::memcpy(params + size_t(c) * 4, &gp, 4);
    s[c] = fp16_to_f32(gp.scale);
    z[c] = fp16_to_f32(gp.zero);
  }
  uint8_t codes[kQuantMaxHeadDim];
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < d; ++c) codes[c] = uniform_code(k[size_t(t) * d + c], s[c], z[c], L);
    pack_codes(p.bits, d, codes, out + size_t(t) * row_bytes);
  }
}

void kivi_dequantize_key_block(const KiviKeyParams& p, const uint8_t* in, float* k) {
  const int T = p.block_tokens, d = p.head_dim;
  const size_t row_bytes = kivi_key_row_code_bytes(p);
  float s[kQuantMaxHeadDim], z[kQuantMaxHeadDim];
  for (int c = 0; c < d; ++c) {
    const QuantGroupParams gp = load_channel(p, in, c);
    s[c] = fp16_to_f32(gp.scale);
    z[c] = fp16_to_f32(gp.zero);
  }
  uint8_t codes[kQuantMaxHeadDim];
  for (int t = 0; t < T; ++t) {
    unpack_codes(p.bits, d, in + size_t(t) * row_bytes, codes);
    for (int c = 0; c < d; ++c) k[size_t(t) * d + c] = (float(codes[c]) - z[c]) * s[c];
  }
}

void kivi_dequantize_key_row(const KiviKeyParams& p, const uint8_t* in, int t, float* k) {
  const int d = p.head_dim;
  uint8_t codes[kQuantMaxHeadDim];
  unpack_codes(p.bits, d, in + size_t(t) * kivi_key_row_code_bytes(p), codes);
  for (int c = 0; c < d; ++c) {
    const QuantGroupParams gp = load_channel(p, in, c);
    k[c] = (float(codes[c]) - fp16_to_f32(gp.zero)) * fp16_to_f32(gp.scale);
  }
}

void kivi_dot_key_block_ref(const KiviKeyParams& p, const float* q, const uint8_t* block, float* scores) {
  const int T = p.block_tokens, d = p.head_dim;
  std::vector<float> k(static_cast<size_t>(T) * static_cast<size_t>(d));
  kivi_dequantize_key_block(p, block, k.data());
  for (int t = 0; t < T; ++t) {
    double acc = 0.0;
    for (int c = 0; c < d; ++c) acc += double(q[c]) * double(k[size_t(t) * d + c]);
    scores[t] = float(acc);
  }
}

void kivi_dot_key_block(const KiviKeyParams& p, const float* q, const uint8_t* block, float* scores) {
  const int T = p.block_tokens, d = p.head_dim;
  const size_t row_bytes = kivi_key_row_code_bytes(p);
  float qs[kQuantMaxHeadDim];
  double off = 0.0;
  for (int c = 0; c < d; ++c) {
    const QuantGroupParams gp = load_channel(p, block, c);
    const float s = fp16_to_f32(gp.scale), z = fp16_to_f32(gp.zero);
    qs[c] = q[c] * s;
    off += double(qs[c]) * z;
  }
  for (int t = 0; t < T; ++t) scores[t] = float(double(dot_codes(p.bits, d, qs, block + size_t(t) * row_bytes)) - off);
}

}  // namespace oscar
