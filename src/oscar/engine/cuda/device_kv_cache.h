// The paged KV cache on the device (docs/kv-layout.md §8, the CPU cache's bytes): per layer
// one pool of BF16 fp pages [n_fp_pages, n_kv_heads, 16, d] for K and for V, and one pool of
// packed history pages [n_hist_pages, n_kv_heads, 64 · row_bytes]. A page number means the
// same tokens in every layer; the page tables live on the host (the source of truth) and,
// per sequence slot, on the device ([max_seqs, stride] int32, −1 = none or released).
//
// A sequence at length t is [sink 0..S) ‖ [history S..h(t)) ‖ [recent h(t)..t) with
// h(t) = history_boundary(t, S, W) (kv/window_rule.h, the CPU cache's rule with T = 1); a layer with bits = 0 keeps
// every token in fp pages. A step for one token at position t: begin_token() gives it an fp
// page (and history pages for the row h(t) that becomes history at t + 1); after every
// layer has run, end_token() commits the length and releases fp pages that hold history only.
//
// Self-contained like decode_attention.h: depends on the CUDA runtime and header-only
// plain C++ (kv/kv_format.h) only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "oscar/cuda/device_memory.h"
#include "oscar/kv/kv_format.h"

namespace oscar::cuda {

// The KV format: oscar::KvFormat (kv/kv_format.h), the one both engines run; the cache
// checks what it cannot hold (codes other than 2, 4 and 8 bits, K and V coded apart,
// --k-scale).
struct KvCacheLimits {
  int max_seqs = 1;          // sequence slots
  int64_t max_seq_len = 0;   // tokens per sequence (sizes the page tables)
  int64_t fp_pages = 0;      // 0: as many as max_seqs sequences of max_seq_len need
  int64_t hist_pages = 0;    // 0: likewise
  int prefill_chunk = 1024;  // most tokens of one sequence in one launch (DeviceModel::prefill)
  int prefill_logits_rows = 256;  // a prefill's logits are computed (and kept) this many rows at a time
};

// The page counts and sizes a format gives, with no pools behind them: what the cache
// below uses, and what a budget is planned with before any GPU memory exists.
class KvPageGeometry {
 public:
  KvPageGeometry() = default;
  KvPageGeometry(int n_layers, int n_kv_heads, int head_dim, const KvFormat& fmt);

  int64_t history_end(int64_t t) const;          // h(t) = S + max(0, t − S − W)
  int64_t fp_pages_for_length(int64_t t) const;  // fp pages a sequence holds after t tokens
  int64_t hist_pages_for_length(int64_t t) const;  // history pages, the step for token t included
  size_t row_bytes(int layer) const;             // packed history row of `layer` (0 for BF16 layers)
  size_t fp_page_bytes() const;                  // one page of every layer, K and V
  size_t hist_page_bytes() const;                // likewise (0 when no layer has history)
  bool keeps_fp() const { return keep_fp_; }     // some layer is BF16 only: fp pages are never released
  bool has_history() const { return history_; }
  static int fp_page_tokens();    // 16
  static int hist_page_tokens();  // 64

 private:
  int n_layers_ = 0, n_kv_heads_ = 0, head_dim_ = 0, sink_ = 0, window_ = 0;
  std::vector<size_t> row_bytes_;  // per layer
  bool keep_fp_ = false, history_ = false;
};

class DeviceKvCache {
 public:
  DeviceKvCache(int n_layers, int n_kv_heads, int head_dim, const KvFormat& fmt, const KvCacheLimits& limits);

  const KvFormat& format() const { return fmt_; }
  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  int max_seqs() const { return limits_.max_seqs; }
  int64_t max_seq_len() const { return limits_.max_seq_len; }
  const KvPageGeometry& geometry() const { return geometry_; }
  size_t row_bytes(int layer) const { return geometry_.row_bytes(layer); }

  // Sequence slots. add_sequence throws when all slots are taken.
  int add_sequence();
  void remove_sequence(int slot);   // frees its pages
  bool active(int slot) const;
  int64_t length(int slot) const;
  // h(t) of this cache for a sequence of length t.
  int64_t history_end(int64_t t) const { return geometry_.history_end(t); }

  // Reserves the pages tokens length(slot) … length(slot) + n − 1 need (their fp rows and
  // the history rows they demote); throws std::runtime_error naming the slot when the
  // cache is full or max_seq_len would be passed (nothing changes then).
  void begin_tokens(int slot, int64_t n);
  // Commits them: length + n, releases fp pages that now hold history only.
  void end_tokens(int slot, int64_t n);
  void begin_token(int slot) { begin_tokens(slot, 1); }
  void end_token(int slot) { end_tokens(slot, 1); }
  // Bytes of KV data a sequence of length t holds (its pages); the BF16 cost of the same
  // tokens, for the memory report.
  size_t bytes_for_length(int64_t t) const;
  size_t bf16_bytes_for_length(int64_t t) const;
  size_t bytes_in_use() const;   // pages in use now, all layers, K and V
  size_t bytes_reserved() const { return mem_.bytes(); }

  // Accounting for a scheduler: the pages begin_tokens(slot, n) would take now, the pages a
  // sequence holds at length t (as begin_tokens / end_tokens leave it), what is free and in
  // all, page sizes, and the pages in use by segment (an fp page holding a sink token is sink;
  // a page several sequences share counts once).
  struct Pages {
    int64_t fp = 0, hist = 0;
  };
  Pages append_need(int slot, int64_t n) const;
  Pages pages_for_length(int64_t t) const {
    return {geometry_.fp_pages_for_length(t), geometry_.hist_pages_for_length(t)};
  }
  Pages free_pages() const { return {int64_t(free_fp_.size()), int64_t(free_hist_.size())}; }
  Pages total_pages() const { return {limits_.fp_pages, limits_.hist_pages}; }
  size_t fp_page_bytes() const { return geometry_.fp_page_bytes(); }
  size_t hist_page_bytes() const { return geometry_.hist_page_bytes(); }
  void segment_pages(int64_t* sink, int64_t* recent, int64_t* hist) const;

  // Page sharing, for a prefix cache (the host's PrefixIndex keeps the entries). A page has
  // owners: the slots whose tables hold it and the cache entries that hold it; it returns
  // to the free list when the last one lets go. Only pages no one writes again are shared:
  // whole fp pages below a sequence's length and history pages whose rows are written.
  enum class Pool { fp, hist };
  int32_t entry(Pool pool, int slot, int64_t i) const;  // slot's table entry i (−1: none)
  void cache_hold(Pool pool, int32_t page);  // a cache entry takes a held page
  void cache_drop(Pool pool, int32_t page);  // and lets it go
  bool cache_only(Pool pool, int32_t page) const;  // held by cache entries alone (evictable)
  Pages cache_only_pages() const { return {cache_only_[0], cache_only_[1]}; }
  // Gives the empty `slot` a prefix of `length` tokens: fp[i] and hist[i] are its table
  // entries (−1: none); each page listed gains the slot as an owner.
  void adopt(int slot, int64_t length, const std::vector<int32_t>& fp, const std::vector<int32_t>& hist);
  // Replaces the slot's history entry i by a private copy of its page (copy on write: the
  // slot will write rows into it), ordered on the cache's stream after the writes before
  // it; false, with nothing changed, when no page is free.
  bool unshare_hist(int slot, int64_t i);
  void clear_sequence(int slot);  // drops its tokens and pages, keeps the slot

  // Swap to host memory (a server's swap space): which table entries of a slot held pages,
  // and the bytes of those pages, per layer fp K, fp V, history K, history V in table order.
  // swap_bytes: what swap_out copies. swap_out copies the slot's pages to `host` (pinned
  // memory for speed) and removes the slot, as the CPU cache removes a swapped sequence;
  // swap_in gives an empty `slot` fresh pages and
  // copies them back (false, nothing changed, when they are not free). Both wait for their
  // copies, so the host memory may be freed or reused when they return.
  struct SwapTable {
    int64_t length = 0;
    std::vector<uint8_t> fp_held, hist_held;
    Pages pages() const;
  };
  size_t swap_bytes(int slot) const;
  SwapTable swap_out(int slot, uint8_t* host);
  bool swap_in(int slot, const SwapTable& table, const uint8_t* host);

  // Device views for the kernels of layer l.
  uint16_t* fp_k(int l) const { return fp_k_[size_t(l)]; }
  uint16_t* fp_v(int l) const { return fp_v_[size_t(l)]; }
  uint8_t* hist_k(int l) const { return hist_k_[size_t(l)]; }
  uint8_t* hist_v(int l) const { return hist_v_[size_t(l)]; }
  int fp_stride() const { return fp_stride_; }
  int hist_stride() const { return hist_stride_; }
  // Slot tables on the device: [max_seqs, stride]; kept in step with the host by the
  // page-changing calls (one small copy per changed entry, ordered on the cache's stream).
  void set_stream(cudaStream_t s) { stream_ = s; }
  const int32_t* fp_table_device() const { return d_fp_table_; }
  const int32_t* hist_table_device() const { return d_hist_table_; }

 private:
  void check_slot(int slot, const char* what) const;
  void set_entry(bool hist, int slot, int64_t i, int32_t page);
  void upload_tables(int slot);  // the slot's rows of both tables, one copy each
  // The slot's pages (fp then history lists, in table order) to or from host memory.
  void copy_swap(const std::vector<int32_t>& fp, const std::vector<int32_t>& hist, uint8_t* host, bool to_host);
  int32_t take_page(bool hist);          // a free page, one owner
  void release_page(bool hist, int32_t page);
  // Changes a page's owners (by_cache: a cache entry) keeping cache_only_ and the free list.
  void change_owners(bool hist, int32_t page, int delta, bool by_cache);
  // Page-table entries without a page that tokens length … length + n − 1 need: their fp
  // pages and the history pages of the rows [h(t0), h(t0 + n)) they demote.
  void missing_pages(int slot, int64_t n, std::vector<int64_t>* fp, std::vector<int64_t>* hist) const;

  cudaStream_t stream_ = nullptr;
  int n_layers_, n_kv_heads_, head_dim_;
  KvFormat fmt_;
  KvCacheLimits limits_;
  KvPageGeometry geometry_;
  int fp_stride_ = 0, hist_stride_ = 0;
  DeviceMemory mem_;
  std::vector<uint16_t*> fp_k_, fp_v_;
  std::vector<uint8_t*> hist_k_, hist_v_;
  int32_t* d_fp_table_ = nullptr;
  int32_t* d_hist_table_ = nullptr;
  std::vector<int32_t> h_fp_table_, h_hist_table_;
  std::vector<int32_t> free_fp_, free_hist_;
  std::vector<int32_t> refs_[2], cache_refs_[2];  // per pool and page: owners (0: free), of them cache entries
  int64_t cache_only_[2] = {0, 0};                 // pages whose owners are all cache entries
  std::vector<int64_t> length_;
  std::vector<bool> active_;
};

}  // namespace oscar::cuda
