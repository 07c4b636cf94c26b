// Paged KV cache for many sequences. Storage per layer, K and V apart:
//   k_[layer]: [n_blocks, n_kv_heads, block_tokens, head_dim] in the spec's dtype
// A sequence owns a block table; token t of it lives in block table[t / block_tokens]
// at row t % block_tokens. Writes for a step go to every layer, then commit() makes
// them visible by advancing the sequence length. INT2 segments (sink / history /
// recent) will be more views over pages of the same pool.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "oscar/kv/block_allocator.h"
#include "oscar/kv/kv_spec.h"

namespace oscar {

using SeqId = int32_t;

// Read-only view of one (layer, sequence): what attention kernels need, no engine types.
struct KvSeqView {
  KvDtype dtype = KvDtype::bf16;
  const uint8_t* k_pool = nullptr;  // this layer's K pool base
  const uint8_t* v_pool = nullptr;  // this layer's V pool base
  const int32_t* blocks = nullptr;  // [ceil(n_tokens / block_tokens)] block ids
  int64_t n_tokens = 0;
  int block_tokens = 0;
  int n_kv_heads = 0;
  int head_dim = 0;

  // Byte offset of row (kv_head, token) inside a pool.
  int64_t row_offset(int kv_head, int64_t token) const {
    const int64_t elem = dtype == KvDtype::f32 ? 4 : 2;
    const int64_t block = blocks[token / block_tokens];
    return (((block * n_kv_heads + kv_head) * block_tokens) + token % block_tokens) * head_dim * elem;
  }
};

class KvCache {
 public:
  // Room for `capacity_tokens` tokens over all sequences (rounded up to whole pages).
  KvCache(KvShape shape, KvSpec spec, int64_t capacity_tokens);

  const KvShape& shape() const { return shape_; }
  const KvSpec& spec() const { return spec_; }

  SeqId add_sequence();
  void remove_sequence(SeqId seq);  // frees its pages
  void clear_sequence(SeqId seq);   // keeps the id, drops all tokens
  bool has_sequence(SeqId seq) const { return seqs_.count(seq) != 0; }
  int64_t length(SeqId seq) const;

  // Makes room for n more tokens; false (and no change) when pages run out.
  bool reserve(SeqId seq, int64_t n);
  // Writes rows for tokens [pos, pos + n) of one layer; k, v: [n, n_kv_heads, head_dim] f32.
  // The pages must be reserved, and pos must be the current length (append only).
  void write(int layer, SeqId seq, int64_t pos, int64_t n, const float* k, const float* v);
  void commit(SeqId seq, int64_t n);  // length += n, after every layer was written

  // View over tokens [0, n_tokens) of a layer; n_tokens may exceed length() by the
  // tokens written but not yet committed in the current step.
  KvSeqView view(int layer, SeqId seq, int64_t n_tokens) const;
  // Copies K and V rows of one KV head, tokens [0, n), to f32: k_out, v_out: [n, head_dim].
  void gather_f32(int layer, SeqId seq, int kv_head, int64_t n, float* k_out, float* v_out) const;

  // Accounting.
  int64_t capacity_tokens() const { return int64_t(alloc_.n_blocks()) * spec_.block_tokens; }
  int64_t free_tokens() const { return int64_t(alloc_.n_free()) * spec_.block_tokens; }
  int64_t bytes_per_token() const;  // K and V over all layers and heads
  int64_t bytes_used(SeqId seq) const;  // bytes held by the sequence's tokens (not whole pages)
  int64_t bytes_allocated() const;  // the whole pool

 private:
  struct Sequence {
    std::vector<int32_t> blocks;
    int64_t length = 0;
  };
  Sequence& seq_ref(SeqId seq);
  const Sequence& seq_ref(SeqId seq) const;
  int64_t block_bytes() const;

  KvShape shape_;
  KvSpec spec_;
  BlockAllocator alloc_;
  std::vector<std::vector<uint8_t>> k_, v_;  // per layer
  std::map<SeqId, Sequence> seqs_;
  SeqId next_id_ = 0;
};

}  // namespace oscar
