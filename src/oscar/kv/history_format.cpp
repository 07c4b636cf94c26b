// Binds each history format to its codec (quant_codec, lloyd_max, kivi_codec).
#include "oscar/kv/history_format.h"

#include "oscar/core/error.h"
#include "oscar/kv/kivi_codec.h"
#include "oscar/kv/lloyd_max.h"
#include "oscar/kv/quant_codec.h"
#include "oscar/ops/convert.h"

namespace oscar {

namespace {
QuantParams row_params(const HistoryFormat& f) {
  QuantParams p;
  p.head_dim = f.head_dim;
  p.group = f.group;
  p.clip_ratio = f.clip;
  p.bits = f.quant == KvQuant::int8 ? 8 : f.quant == KvQuant::int4 ? 4 : 2;
  return p;
}

KiviKeyParams kivi_params(const HistoryFormat& f) {
  KiviKeyParams p;
  p.bits = 2;
  p.head_dim = f.head_dim;
  p.block_tokens = f.block_tokens;
  return p;
}

bool exact_centroids(const HistoryFormat& f) { return f.quant == KvQuant::int2_lloyd_max_exact; }

// bf16_raw: a row is head_dim bf16 values, no scale (a bf16 layer of a per-layer mixed cache).
bool raw(const HistoryFormat& f) { return f.quant == KvQuant::bf16_raw; }
size_t raw_row_bytes(const HistoryFormat& f) { return size_t(f.head_dim) * sizeof(bf16); }
const bf16* raw_row(const HistoryFormat& f, const uint8_t* block, int row) {
  return reinterpret_cast<const bf16*>(block + size_t(row) * raw_row_bytes(f));
}

}  // namespace


size_t HistoryFormat::block_bytes() const {
  if (raw(*this)) return size_t(block_tokens) * raw_row_bytes(*this);
  if (per_channel) return kivi_key_block_bytes(kivi_params(*this));
  return size_t(block_tokens) * quant_row_bytes(row_params(*this));
}

double HistoryFormat::bits_per_element() const {
  if (raw(*this)) return 16.0;
  if (per_channel) return kivi_key_bits_per_element(kivi_params(*this));
  return oscar::bits_per_element(row_params(*this));
}

void history_store(const HistoryFormat& f, uint8_t* block, int row0, int n, const float* rows) {
  if (f.per_channel) {
    OSCAR_CHECK(row0 == 0 && n == f.block_tokens, "per-channel history stores whole blocks ({} rows at {})", n, row0);
    kivi_quantize_key_block(kivi_params(f), rows, block);
    return;
  }
  if (raw(f)) {
    bf16* out = reinterpret_cast<bf16*>(block + size_t(row0) * raw_row_bytes(f));
    f32_to_bf16(rows, out, int64_t(n) * f.head_dim);
    return;
  }
  const QuantParams p = row_params(f);
  const size_t rb = quant_row_bytes(p);
  for (int i = 0; i < n; ++i) {
    const float* x = rows + int64_t(i) * f.head_dim;
    uint8_t* out = block + size_t(row0 + i) * rb;
    if (f.quant == KvQuant::int2_lloyd_max) {
      quantize_row_lloyd_max_approx(p, x, out);  // stored in the uniform format
    } else if (exact_centroids(f)) {
      quantize_row_lloyd_max_exact(p, x, out);
    } else {
      quantize_row(p, x, out);
    }
  }
}

void history_load(const HistoryFormat& f, const uint8_t* block, int row, float* out) {
  if (f.per_channel) return kivi_dequantize_key_row(kivi_params(f), block, row, out);
  if (raw(f)) return bf16_to_f32(raw_row(f, block, row), out, f.head_dim);
  const QuantParams p = row_params(f);
  const uint8_t* in = block + size_t(row) * quant_row_bytes(p);
  if (exact_centroids(f)) return dequantize_row_lloyd_max_exact(p, in, out);
  dequantize_row(p, in, out);
}

float history_dot(const HistoryFormat& f, const uint8_t* block, int row, const float* q) {
  if (f.per_channel) {  // KIVI keys: a baseline, read row by row without a fast kernel
    float r[kQuantMaxHeadDim];
    kivi_dequantize_key_row(kivi_params(f), block, row, r);
    float acc = 0.0f;
    for (int c = 0; c < f.head_dim; ++c) acc += q[c] * r[c];
    return acc;
  }
  if (raw(f)) {
    float r[kQuantMaxHeadDim];
    bf16_to_f32(raw_row(f, block, row), r, f.head_dim);
    float acc = 0.0f;
    for (int c = 0; c < f.head_dim; ++c) acc += q[c] * r[c];
    return acc;
  }
  const QuantParams p = row_params(f);
  const uint8_t* in = block + size_t(row) * quant_row_bytes(p);
  if (exact_centroids(f)) return dot_row_lloyd_max_exact(p, q, in);
  return dot_row(p, q, in);
}

void history_axpy(const HistoryFormat& f, const uint8_t* block, int row, float a, float* acc) {
  OSCAR_CHECK(!f.per_channel, "per-channel formats hold keys only");
  if (raw(f)) {
    float r[kQuantMaxHeadDim];
    bf16_to_f32(raw_row(f, block, row), r, f.head_dim);
    for (int c = 0; c < f.head_dim; ++c) acc[c] += a * r[c];
    return;
  }
  const QuantParams p = row_params(f);
  const uint8_t* in = block + size_t(row) * quant_row_bytes(p);
  if (exact_centroids(f)) return axpy_row_lloyd_max_exact(p, a, in, acc);
  axpy_row(p, a, in, acc);
}

}  // namespace oscar
