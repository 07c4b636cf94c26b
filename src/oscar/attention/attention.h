// Causal multi-head attention with grouped KV heads (GQA): query head h reads KV head
// h / (n_heads / n_kv_heads). Scores are scaled by 1/sqrt(head_dim).
#pragma once
#include <cstdint>

#include "oscar/attention/key_bias.h"
#include "oscar/kv/kv_cache.h"

namespace oscar {

struct AttentionShape {
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;
  int head_dim = 0;
};

// Reference over f32 K/V. q: [n_q, n_heads, d] for queries at absolute positions
// q_pos0 .. q_pos0 + n_q − 1; k, v: [n_kv_heads, n_kv, d] for keys at positions 0 .. n_kv − 1;
// out: [n_q, n_heads, d]. Query i sees keys 0 .. q_pos0 + i. Accumulates in double.
void attention_ref(const AttentionShape& s, const float* q, int64_t n_q, int64_t q_pos0, const float* k,
                   const float* v, int64_t n_kv, float* out);

// Prefill/batch path: gathers each KV head of the cached sequence to f32, then each query
// position on its own (prefill_position.h), threaded over positions, so that a row's bits do
// not depend on the chunking. Keys are the first q_pos0 + n_q cache rows.
// key_add (optional): [n_kv, n_kv_heads, d] rows added to every cached key before the
// scores, in the cache's basis. It carries an exactly known part of k that the cache does
// not store (the RoPE-rotated QKV bias, see Transformer: --k-bias-split).
void attention_prefill(const AttentionShape& s, const KvCache& cache, int layer, SeqId seq, const float* q,
                       int64_t n_q, int64_t q_pos0, float* out, const float* key_add = nullptr);

// Decode: one query token over all n_kv rows of `kv`, reading the pages directly.
// Split over (KV head, key chunk) tasks on the thread pool, merged by online softmax.
// q, out: [n_heads, d].
// key_bias (optional): the same key part as prefill's key_add, evaluated from positions
// (key_bias.h), so that decode streams no per-token rows.
void attention_decode(const AttentionShape& s, const KvSeqView& kv, const float* q, float* out,
                      const KeyBias* key_bias = nullptr);
// Scalar reference of the same computation (one pass per head, double accumulation), the
// key part given as rows: key_add [kv.n_tokens, n_kv_heads, d] (KeyBias::rows).
void attention_decode_ref(const AttentionShape& s, const KvSeqView& kv, const float* q, float* out,
                          const float* key_add = nullptr);

}  // namespace oscar
