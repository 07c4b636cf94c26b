// The one interface a scheduler or a generation loop drives, whatever device runs the
// model: a block manager over the KV pages (add / free sequences, what appending takes,
// what is free) and run(batch), one forward step over several sequences.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "oscar/engine/batch.h"
#include "oscar/engine/swap_space.h"
#include "oscar/kv/kv_cache.h"

namespace oscar::engine {

// Bytes of one page of each pool (every layer, K and V).
struct KvPageBytes {
  int64_t fp = 0;
  int64_t history = 0;
};

// What one step gives back.
struct StepOutput {
  std::vector<float> logits;    // [n_seqs, n_vocab]; row i is valid only where batch.wants_logits(i)
  std::vector<int32_t> argmax;  // [n_seqs] the first largest logit of each row (as oscar::argmax)
  // [rows, n_vocab] the logits of every token a sequence asked for (Batch::token_logits_from):
  // its tokens k … n − 1, the sequences in batch order; empty when none asked.
  std::vector<float> token_logits;
};

class Runner {
 public:
  virtual ~Runner() = default;

  virtual int32_t n_vocab() const = 0;
  virtual KvShape kv_shape() const = 0;  // layers, KV heads, head_dim
  // Backend, KV format and kernel path, for the start-up report.
  virtual std::string describe() const = 0;

  // Block manager. A new sequence holds no pages; free_sequence returns all of them.
  virtual SeqId add_sequence() = 0;
  virtual void free_sequence(SeqId seq) = 0;
  virtual int64_t length(SeqId seq) const = 0;
  virtual KvPages append_need(SeqId seq, int64_t n) const = 0;  // pages that appending n tokens takes now
  virtual KvPages pages_for_length(int64_t t) const = 0;       // pages a sequence of length t holds
  virtual KvPages free_pages() const = 0;
  virtual KvPageBytes page_bytes() const = 0;
  virtual KvSegmentUsage usage() const = 0;
  // Bytes of KV data a sequence holds (codes, scales, fp rows), for bits-per-element reports.
  virtual int64_t kv_bytes(SeqId seq) const = 0;
  // Prefix cache (KvCache's contract): share the longest cached prefix of `tokens` with an
  // empty sequence (returns the tokens it now holds; 0: a miss), and offer a sequence's
  // whole pages over tokens[0, its length) for later requests.
  // Off until enabled with a salt naming the model, its rotations and KV flags; returns
  // the tokens of one shared block, or throws oscar::Error naming why the format's pages
  // cannot be shared.
  virtual int enable_prefix_cache(std::string_view salt) = 0;
  virtual int64_t attach_prefix(SeqId seq, std::span<const int32_t> tokens) = 0;
  virtual void register_prefix(SeqId seq, std::span<const int32_t> tokens) = 0;
  virtual PrefixCacheStats prefix_stats() const = 0;
  // Swap space in host memory (off until given bytes): a preempted sequence's pages copied
  // out and freed, restored later bit for bit, where recomputing would run its generated
  // tokens through prefill, whose sums round differently from the decode steps that made
  // them (and would pay for its whole prompt again).
  // swap_out: a handle, or −1 with nothing changed when the space cannot hold the pages;
  // swap_need: the pages swap_in takes; swap_in: the restored sequence, or −1 with nothing
  // changed when its pages are not free; swap_drop: a swapped request that ended.
  virtual void set_swap_space(int64_t bytes) = 0;
  virtual int64_t swap_out(SeqId seq) = 0;
  virtual KvPages swap_need(int64_t handle) const = 0;
  virtual SeqId swap_in(int64_t handle) = 0;
  virtual void swap_drop(int64_t handle) = 0;
  virtual SwapStats swap_stats() const = 0;
  bool can_append(SeqId seq, int64_t n) const {
    const KvPages need = append_need(seq, n), free = free_pages();
    return need.fp <= free.fp && need.history <= free.history;
  }

  // Appends every sequence's tokens (batch.positions must be their lengths) and gives, for
  // each sequence's last token, its greedy id and (where the batch wants them) its logits.
  // Throws oscar::Error, with nothing appended, when the pages do not fit or a token is
  // out of range.
  virtual void run(const Batch& batch, StepOutput& out) = 0;
};

}  // namespace oscar::engine
