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
// Quantized history rows, read packed (no dequantized copy). decode_chunk_history picks
// the AVX2 kernel when both formats have one, else the generic path.
void decode_chunk_history(const DecodeChunk& c, SoftmaxPartial* part, float* part_o);
// AVX2, per-token formats (uniform INT2/4/8, Lloyd-Max INT2): each row's codes expanded
// once for a tile of the group's heads, scale/zero folded per group (see its file).
bool decode_history_avx2_supports(const HistoryFormat& f);
void decode_chunk_history_avx2(const DecodeChunk& c, SoftmaxPartial* part, float* part_o);
// Generic: one codec call per (row, query head) (history_dot / history_axpy): KIVI keys,
// raw bf16 rows, machines without AVX2.
void decode_chunk_history_generic(const DecodeChunk& c, SoftmaxPartial* part, float* part_o);
// Scalar reference of the history chunk: rows dequantized by history_load, sums in double.
void decode_chunk_history_ref(const DecodeChunk& c, SoftmaxPartial* part, float* part_o);

// s[i] = exp(s[i] − m) for i < n (every s[i] <= m), returns Σ s[i] (AVX2 exp, ≤ 2 ulp).
float softmax_exp_avx2(float* s, int64_t n, float m);

// Folds a sub-chunk of m raw scores into a running partial: s ← (s + add)·scale (add may be
// null), then the weights exp(s − m_new) in place; `part` takes them, and o[0, d) (the output
// the earlier sub-chunks accumulated) is rescaled by the change of maximum where rescale_o.
void fold_sub_chunk_avx2(float* s, const float* add, int64_t m, float scale, SoftmaxPartial& part, float* o, int d,
                         bool rescale_o);

}  // namespace oscar
