// The prefix cache's index, one for the CPU and the GPU caches: whole blocks of a prompt
// keyed by a SHA-256 chain, SHA-256(parent key ‖ salt ‖ the block's token ids), the salt
// naming the model, KV format and rotations. An entry names the pages that hold its block
// (an fp page, a history page, or both) and carries an LRU clock. The index owns no
// pages: its cache retains a page when an entry takes it and releases it on eviction.
//
// The hit rule both caches share (docs/server.md): a prefix of n blocks (P = n·B tokens)
// can be attached to a new sequence when every block has the page that sequence needs at
// length P: a history page for blocks inside [S, h(P)) of a quantized format, an fp page
// otherwise. At least two tokens stay to compute: a one-token rest would run as a decode
// step, whose sums differ in the last bits from the prefill that a miss runs.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace oscar {

struct PrefixCacheStats {
  int64_t queries = 0;  // full prompt blocks looked up
  int64_t hits = 0;     // of them attached from the cache
  int64_t entries = 0;
};

struct PrefixEntry {
  int32_t fp = -1, history = -1;  // pages the cache holds for this block (−1: none)
  uint64_t used = 0;              // LRU clock
};

// The window geometry the hit rule needs.
struct PrefixWindows {
  int block_tokens = 16;  // B: tokens per entry
  int64_t sink = 0;       // S (a multiple of B where quantized)
  bool quantized = false;
  std::function<int64_t(int64_t)> history_end;  // h(t)
};

class PrefixIndex {
 public:
  using Key = std::array<uint8_t, 32>;

  // Starts an empty index; `salt` names everything that makes equal tokens give different pages.
  void enable(std::string_view salt, const PrefixWindows& w);
  bool enabled() const { return on_; }
  const PrefixWindows& windows() const { return w_; }

  // Keys of the first n_blocks whole blocks of tokens.
  std::vector<Key> keys(std::span<const int32_t> tokens, int64_t n_blocks) const;
  // The cached blocks of a prompt, in order from its first block up to the first one missing
  // (at most the blocks that leave two tokens to compute); counts them as queries.
  std::vector<PrefixEntry*> find(std::span<const int32_t> tokens);
  // The longest n ≤ found.size() that the hit rule allows and `also(n)` accepts (0: none).
  int64_t usable_blocks(const std::vector<PrefixEntry*>& found,
                        const std::function<bool(int64_t)>& also = nullptr) const;
  // Whether block b of a prefix attached at P = n·B tokens is read from its history page.
  bool needs_history(int64_t b, int64_t n) const;
  void count_hits(int64_t n) { hits_ += n; }
  void touch(PrefixEntry& e) { e.used = ++clock_; }
  // Marks the blocks of one prefix used, its first block last (the most recent): eviction,
  // least recently used first, then takes a prefix from its end, and what is left of it
  // still attaches. (In block order, the first block would go first and strand the rest.)
  void touch_prefix(std::span<PrefixEntry* const> blocks);
  // Offers the blocks of one prefix (their keys, in order): fill(b, entry) gives block b's
  // entry, created empty if missing, the pages it can; an entry left with none is dropped.
  // The blocks are visited deepest first, so that they end touched as touch_prefix leaves them.
  void put_prefix(const std::vector<Key>& keys, const std::function<void(int64_t, PrefixEntry&)>& fill);

  // The entry of a key, created empty if missing, and touched.
  PrefixEntry& entry(const Key& k);
  void erase(const Key& k) { map_.erase(k); }
  // Removes the least recently used entry that `frees` accepts, after `release` has given
  // back its pages; false when no entry qualifies.
  bool evict_one(const std::function<bool(const PrefixEntry&)>& frees,
                 const std::function<void(const PrefixEntry&)>& release);
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [k, e] : map_) f(e);
  }
  PrefixCacheStats stats() const { return {queries_, hits_, int64_t(map_.size())}; }

 private:
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  bool on_ = false;
  PrefixWindows w_;
  Key salt_{};
  std::unordered_map<Key, PrefixEntry, KeyHash> map_;
  uint64_t clock_ = 0;
  int64_t queries_ = 0, hits_ = 0;
};

}  // namespace oscar
