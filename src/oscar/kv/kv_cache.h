// Paged KV cache for many sequences, in the segments of a KvSpec:
//   [sink 0..S) ‖ [history S..h) ‖ [recent h..t)      h = spec.history_end(t)
// Full-precision rows (sink, recent, and a step's new tokens) live in fp pages:
//   k_[layer], v_[layer]: [n_fp_blocks, n_kv_heads, block_tokens, head_dim] in spec.dtype
// quantized history rows live in history pages:
//   qk_[layer], qv_[layer]: [n_q_blocks, n_kv_heads, HistoryFormat::block_bytes()]
// A step runs, per layer: write(new rows) → demote(rows now history) → attention; then
// commit() advances the length and releases fp pages whose tokens are all history.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string_view>
#include <vector>

#include "oscar/core/lazy_buffer.h"
#include "oscar/kv/block_allocator.h"
#include "oscar/kv/history_format.h"
#include "oscar/kv/kv_spec.h"
#include "oscar/kv/prefix_index.h"

namespace oscar {

using SeqId = int32_t;

// Read-only view of one (layer, sequence) for the attention kernels: no engine types.
struct KvSeqView {
  KvDtype dtype = KvDtype::bf16;
  const uint8_t* k_pool = nullptr;  // this layer's fp K pool base
  const uint8_t* v_pool = nullptr;
  const int32_t* blocks = nullptr;  // fp block of token t: blocks[t / block_tokens] (−1: released)
  int64_t n_tokens = 0;             // sequence length the view covers
  int block_tokens = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  // History segment [hist_begin, hist_end); empty when not quantized.
  int64_t hist_begin = 0, hist_end = 0;
  const uint8_t* qk_pool = nullptr;
  const uint8_t* qv_pool = nullptr;
  const int32_t* q_blocks = nullptr;  // history block of token t: q_blocks[(t − hist_begin) / hf.block_tokens]
  const HistoryFormat* k_format = nullptr;
  const HistoryFormat* v_format = nullptr;

  bool in_history(int64_t t) const { return t >= hist_begin && t < hist_end; }
  // Byte offset of the fp row (kv_head, token) inside an fp pool.
  int64_t row_offset(int kv_head, int64_t token) const {
    const int64_t elem = dtype == KvDtype::f32 ? 4 : 2;
    const int64_t block = blocks[token / block_tokens];
    return (((block * n_kv_heads + kv_head) * block_tokens) + token % block_tokens) * head_dim * elem;
  }
  // History block (kv_head) holding token t, and t's row inside it.
  const uint8_t* history_block(const uint8_t* pool, const HistoryFormat& f, int kv_head, int64_t t, int* row) const {
    const int64_t i = t - hist_begin;
    *row = int(i % f.block_tokens);
    return pool + (int64_t(q_blocks[i / f.block_tokens]) * n_kv_heads + kv_head) * int64_t(f.block_bytes());
  }
};

// Page counts of the two pools: fp pages (block_tokens tokens of every layer's K and V
// rows in the fp dtype) and history pages (a history block of every layer's K and V).
struct KvPages {
  int64_t fp = 0;
  int64_t history = 0;
};

// Pages in use by segment (an fp page holding any sink token counts as sink; a page shared
// by several sequences counts once), pages held only by the prefix cache, and free pages.
struct KvSegmentUsage {
  int64_t sink_pages = 0, recent_pages = 0, history_pages = 0;
  int64_t cached_fp_pages = 0, cached_history_pages = 0;  // evictable: no sequence holds them
  int64_t fp_free_pages = 0, history_free_pages = 0;
};

// A sequence's pages copied out of the pools (a server's swap space in host memory):
// KvCache::swap_in restores them bit for bit, so a preempted sequence goes on as if it
// had never stopped (recomputing would run its generated tokens through prefill, whose
// sums round differently from the decode steps that made them).
struct KvSwapImage {
  int64_t length = 0, demoted_end = 0;
  std::vector<uint8_t> fp_held;   // per fp table entry: 1 where it holds a page, 0 released
  int64_t history_pages = 0;      // history table entries (all hold pages)
  std::vector<uint8_t> bytes;     // held fp pages then history pages, in table order; each page every layer, K then V
  KvPages pages() const;          // what swap_in takes
};

class KvCache {
 public:
  // Room for `capacity_tokens` tokens over all sequences (rounded up to whole pages).
  // `formats` (one K and one V format per layer) are required when spec.quantized().
  KvCache(KvShape shape, KvSpec spec, int64_t capacity_tokens, std::vector<HistoryFormat> k_formats = {},
          std::vector<HistoryFormat> v_formats = {});
  // Exactly `pages` of each pool (a server sizes them from a byte budget, see KvBudget).
  KvCache(KvShape shape, KvSpec spec, KvPages pages, std::vector<HistoryFormat> k_formats = {},
          std::vector<HistoryFormat> v_formats = {});

  const KvShape& shape() const { return shape_; }
  const KvSpec& spec() const { return spec_; }

  SeqId add_sequence();
  void remove_sequence(SeqId seq);  // frees its pages
  void clear_sequence(SeqId seq);   // keeps the id, drops all tokens
  bool has_sequence(SeqId seq) const { return seqs_.count(seq) != 0; }
  int64_t length(SeqId seq) const;

  // Makes room for n more tokens (fp pages for them, history pages for what they push
  // out of the recent window); false, with nothing changed, when pages run out.
  bool reserve(SeqId seq, int64_t n);
  // The pages reserve(seq, n) would take now, and whether they are free.
  KvPages reserve_need(SeqId seq, int64_t n) const;
  bool can_reserve(SeqId seq, int64_t n) const;
  // Writes fp rows for tokens [pos, pos + n) of one layer; k, v: [n, n_kv_heads, head_dim].
  // pos must be the current length (append only) and the pages reserved.
  void write(int layer, SeqId seq, int64_t pos, int64_t n, const float* k, const float* v);
  // Quantizes the rows of one layer that become history at length new_len.
  void demote(int layer, SeqId seq, int64_t new_len);
  void commit(SeqId seq, int64_t n);  // length += n after every layer was written and demoted

  // View of a layer at length n_tokens (the committed length plus this step's tokens).
  KvSeqView view(int layer, SeqId seq, int64_t n_tokens) const;
  // f32 copies of one KV head's rows [0, n): fp rows where they exist (zeros elsewhere),
  // and dequantized history rows for [hist_begin, hist_end) (zeros elsewhere).
  void gather_fp(int layer, SeqId seq, int kv_head, int64_t n, float* k_out, float* v_out) const;
  void gather_history(int layer, SeqId seq, int kv_head, int64_t n, float* k_out, float* v_out) const;

  // Swap: the bytes swap_out(seq) would copy; swap_out copies the sequence's pages and
  // removes it; swap_in gives the image's tokens to a new sequence in fresh pages (evicting
  // cache-only pages as reserve does), or returns −1, with nothing changed, when they are
  // not free.
  int64_t swap_bytes(SeqId seq) const;
  KvSwapImage swap_out(SeqId seq);
  SeqId swap_in(const KvSwapImage& image);

  // Accounting.
  int64_t capacity_tokens() const { return int64_t(fp_alloc_.n_blocks()) * spec_.block_tokens; }
  int64_t free_tokens() const { return int64_t(fp_alloc_.n_free()) * spec_.block_tokens; }
  int64_t bytes_per_token() const;       // fp K and V over all layers and heads
  int64_t bytes_used(SeqId seq) const;   // bytes the sequence's segments hold (codes, scales, fp rows)
  double bits_per_element(SeqId seq) const;
  int64_t bytes_allocated() const;       // both pools
  int64_t history_tokens(SeqId seq) const;
  // Prefix cache over whole pages (block_tokens tokens), indexed by a PrefixIndex (its
  // key chain and hit rule). An entry holds the block's fp page, its history page, or
  // both, shared read-only by reference count; pages held only by the cache are evicted
  // LRU when a reserve needs them (free_pages() counts them as free). Off unless enabled;
  // refused for KIVI and for windows that are not whole pages.
  void enable_prefix_cache(std::string_view salt);
  bool prefix_cache_enabled() const { return prefix_.enabled(); }
  // Attaches the longest usable cached prefix of `tokens` (whole pages, leaving at least one
  // token to compute) to an empty sequence; returns the tokens attached (0: a miss).
  int64_t attach_prefix(SeqId seq, std::span<const int32_t> tokens);
  // Offers the sequence's full pages over tokens[0, min(size, length)) to the cache.
  void register_prefix(SeqId seq, std::span<const int32_t> tokens);
  PrefixCacheStats prefix_stats() const;

  // Page geometry and accounting for admission and metrics.
  int64_t fp_page_bytes() const;       // one fp page, every layer, K and V
  int64_t history_page_bytes() const;  // one history page, every layer, K and V (0: no history)
  KvPages total_pages() const { return {fp_alloc_.n_blocks(), q_alloc_.n_blocks()}; }
  // Free pages, counting those only the prefix cache holds (a reserve evicts them).
  KvPages free_pages() const;
  // Pages a sequence of length t holds once committed (fp pages of history tokens released).
  KvPages pages_for_length(int64_t t) const;
  KvSegmentUsage segment_usage() const;

 private:
  struct Sequence {
    std::vector<int32_t> blocks;    // fp pages by token / block_tokens; −1 once released
    std::vector<int32_t> q_blocks;  // history pages by (token − sink) / history block_tokens
    int64_t length = 0;
    int64_t demoted_end = 0;        // history rows [sink, demoted_end) are quantized (all layers at commit)
  };
  Sequence& seq_ref(SeqId seq);
  const Sequence& seq_ref(SeqId seq) const;
  int64_t fp_block_bytes() const;
  int64_t q_block_bytes(bool key, int layer) const;
  int history_block_tokens() const;
  void allocate_pools();
  KvPages evictable_pages() const;
  bool evict_for(const KvPages& need);  // frees cache-only pages until `need` fits; false: cannot
  void release_all(Sequence& s);

  KvShape shape_;
  KvSpec spec_;
  std::vector<HistoryFormat> k_formats_, v_formats_;  // per layer
  BlockAllocator fp_alloc_, q_alloc_;
  std::vector<LazyBuffer> k_, v_;    // fp pools per layer (committed as pages are touched)
  std::vector<LazyBuffer> qk_, qv_;  // history pools per layer
  std::map<SeqId, Sequence> seqs_;
  SeqId next_id_ = 0;
  PrefixIndex prefix_;
};

}  // namespace oscar
