// How the history rows of one side (K or V) of one layer are stored, and the row
// operations attention needs on them. A history block holds `block_tokens` rows of one
// KV head; per-token codecs store rows independently, KIVI keys store a whole block
// per channel; bf16_raw stores rows as plain bf16. The byte layouts are in docs/kv-layout.md.
#pragma once
#include <cstddef>
#include <cstdint>

#include "oscar/kv/kv_spec.h"

namespace oscar {

struct HistoryFormat {
  KvQuant quant = KvQuant::int2;
  int head_dim = 0;
  int group = 0;             // along head_dim (per-token codecs)
  float clip = 0.0f;         // quantile clip ratio, 0: off
  bool per_channel = false;  // KIVI keys: one scale/zero per channel over the block's tokens
  int block_tokens = 16;     // rows per history block

  size_t block_bytes() const;  // one (block, KV head)
  double bits_per_element() const;
};

// Quantizes rows [row0, row0 + n) of a block from f32 `rows` ([n, head_dim]).
// Per-channel formats take whole blocks only (row0 = 0, n = block_tokens).
void history_store(const HistoryFormat& f, uint8_t* block, int row0, int n, const float* rows);
void history_load(const HistoryFormat& f, const uint8_t* block, int row, float* out);      // dequantize one row
float history_dot(const HistoryFormat& f, const uint8_t* block, int row, const float* q);  // q · x̂
void history_axpy(const HistoryFormat& f, const uint8_t* block, int row, float a, float* acc);  // acc += a · x̂

}  // namespace oscar
