// Runner on the CPU: a configured Transformer and the paged KvCache it owns.
#pragma once
#include "oscar/engine/runner.h"
#include "oscar/model/transformer.h"

namespace oscar::engine {

class CpuRunner final : public Runner {
 public:
  // The model must outlive the runner (it keeps scratch buffers, so one runner per model).
  CpuRunner(Transformer& model, KvCache cache);

  int32_t n_vocab() const override { return model_.config().n_vocab; }
  KvShape kv_shape() const override { return cache_.shape(); }
  std::string describe() const override;
  SeqId add_sequence() override { return cache_.add_sequence(); }
  void free_sequence(SeqId seq) override { cache_.remove_sequence(seq); }
  int64_t length(SeqId seq) const override { return cache_.length(seq); }
  KvPages append_need(SeqId seq, int64_t n) const override { return cache_.reserve_need(seq, n); }
  KvPages pages_for_length(int64_t t) const override { return cache_.pages_for_length(t); }
  KvPages free_pages() const override { return cache_.free_pages(); }
  KvPageBytes page_bytes() const override { return {cache_.fp_page_bytes(), cache_.history_page_bytes()}; }
  KvSegmentUsage usage() const override { return cache_.segment_usage(); }
  int64_t kv_bytes(SeqId seq) const override { return cache_.bytes_used(seq); }
  int enable_prefix_cache(std::string_view salt) override {
    cache_.enable_prefix_cache(salt);
    return cache_.spec().block_tokens;
  }
  int64_t attach_prefix(SeqId seq, std::span<const int32_t> tokens) override { return cache_.attach_prefix(seq, tokens); }
  void register_prefix(SeqId seq, std::span<const int32_t> tokens) override { cache_.register_prefix(seq, tokens); }
  PrefixCacheStats prefix_stats() const override { return cache_.prefix_stats(); }
  void set_swap_space(int64_t bytes) override { swap_.set_capacity(bytes); }
  int64_t swap_out(SeqId seq) override;
  KvPages swap_need(int64_t handle) const override { return swap_.get(handle).pages(); }
  SeqId swap_in(int64_t handle) override;
  void swap_drop(int64_t handle) override { swap_.drop(handle); }
  SwapStats swap_stats() const override { return swap_.stats(); }
  void run(const Batch& batch, StepOutput& out) override;

  KvCache& cache() { return cache_; }
  const KvCache& cache() const { return cache_; }

 private:
  Transformer& model_;
  KvCache cache_;
  SwapSpace<KvSwapImage> swap_;
  std::vector<SeqTokens> seqs_;  // scratch
};

}  // namespace oscar::engine
