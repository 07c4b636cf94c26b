// Inner kernels of decode attention: one KV head, one range of keys, all the query
// heads of its GQA group (each K/V row is read once for the whole group).
#pragma once
#include <cstdint>

#include "oscar/attention/online_softmax.h"
#include "oscar/kv/kv_cache.h"

namespace oscar {

constexpr int kMaxDecodeGroup = 16;
constexpr int kMaxDecodeHeadDim = 256;

struct DecodeChunk {
  const KvSeqView& kv;
  int kv_head;
  int64_t begin, end;  // key range [begin, end), inside one segment (all fp or all history)
  const float* q;      // [group, head_dim], the group's query heads
  int group;
  float scale;         // 1/sqrt(head_dim)
  const float* score_add = nullptr;  // [group, end − begin] added to q·k before scaling, or null
};

// Writes group partials: part[g] and part_o[g * head_dim ...] (unnormalized).
// Full-precision rows (sink / recent):
void decode_chunk_scalar(const DecodeChunk& c, SoftmaxPartial* part, float* part_o);
void decode_chunk_avx2(const DecodeChunk& c, SoftmaxPartial* part, float* part_o);
// Quantized history rows, read packed through the codec (no dequantized copy):
void decode_chunk_history(const DecodeChunk& c, SoftmaxPartial* part, float* part_o);

}  // namespace oscar
