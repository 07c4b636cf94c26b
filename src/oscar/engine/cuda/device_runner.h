// Runner on the GPU: a configured Transformer's weights and KV format uploaded as a
// cuda::DeviceModel, its page pools sized from a byte budget. A step's decode rows and
// prefill chunks run as one DeviceModel::forward (one pass of the matrix products over all
// rows; a step of decode rows only replays a CUDA graph per batch size and key bucket). The prefix cache
// shares whole fp pages (16 tokens, the index's blocks) and written history pages (64 rows)
// by reference count, with the CPU cache's PrefixIndex and hit rule; the one history page a
// hit ends inside is copied, since the new sequence writes its next rows there. Built only
// with CUDA.
#pragma once
#include <memory>

#include "oscar/engine/cuda/device_model.h"
#include "oscar/engine/cuda/device_weight_loader.h"
#include "oscar/engine/cuda/pinned_pool.h"
#include "oscar/engine/runner.h"
#include "oscar/model/transformer.h"

namespace oscar {

struct DeviceKvPlan {
  int64_t fp_pages = 0, hist_pages = 0;
  int64_t fp_page_bytes = 0, hist_page_bytes = 0;
  int64_t fp_page_tokens = 0, hist_page_tokens = 0;
  int64_t bytes = 0;
  int64_t seqs_at_ctx = 0;  // sequences of ctx tokens that fit at once
  int64_t forward_rows = 0;  // most token rows in one forward (the activation buffers)
};

// Rows of one forward when the plan names none: long prompts go through the matrix products
// in pieces this long (H200, Qwen3-8B shape, `oscar bench --device cuda -b 1024|4096`,
// 2026-11-28: 1024-row pieces prefilled 8K tokens at 0.94 of the rate of 4096-row ones;
// 8192 was no faster).
inline constexpr int64_t kDefaultForwardRows = 4096;

// Splits budget_bytes (≤ 0: room for max_seqs sequences of ctx tokens) between the fp and
// history pools of the device cache, as engine::plan_kv_cache does for the CPU cache.
// Throws oscar::Error when one sequence of ctx tokens does not fit.
// forward_rows (≤ 0: kDefaultForwardRows) also sizes the pages one prefill piece holds.
DeviceKvPlan plan_device_kv(const Transformer& t, int64_t budget_bytes, int max_seqs, int64_t ctx,
                            int64_t forward_rows = 0);

class DeviceRunner final : public engine::Runner {
 public:
  DeviceRunner(const Transformer& t, const DeviceKvPlan& plan, int max_seqs, int64_t ctx);

  int32_t n_vocab() const override { return n_vocab_; }
  KvShape kv_shape() const override { return shape_; }
  std::string describe() const override;
  SeqId add_sequence() override;
  void free_sequence(SeqId seq) override;
  int64_t length(SeqId seq) const override;
  KvPages append_need(SeqId seq, int64_t n) const override;
  KvPages pages_for_length(int64_t t) const override;
  KvPages free_pages() const override;
  engine::KvPageBytes page_bytes() const override;
  KvSegmentUsage usage() const override;
  int64_t kv_bytes(SeqId seq) const override { return int64_t(dm_->cache().bytes_for_length(length(seq))); }
  int enable_prefix_cache(std::string_view salt) override;
  int64_t attach_prefix(SeqId seq, std::span<const int32_t> tokens) override;
  void register_prefix(SeqId seq, std::span<const int32_t> tokens) override;
  PrefixCacheStats prefix_stats() const override { return prefix_.stats(); }
  void set_swap_space(int64_t bytes) override { swap_.set_capacity(bytes); }
  int64_t swap_out(SeqId seq) override;
  KvPages swap_need(int64_t handle) const override;
  SeqId swap_in(int64_t handle) override;
  void swap_drop(int64_t handle) override { swap_.drop(handle); }
  engine::SwapStats swap_stats() const override { return swap_.stats(); }
  void run(const engine::Batch& batch, engine::StepOutput& out) override;

 private:
  // A swapped-out sequence: its page-table pattern and its pages' bytes in pinned memory.
  struct SwapImage {
    cuda::DeviceKvCache::SwapTable table;
    std::shared_ptr<uint8_t> bytes;  // back to pinned_ on release
  };
  PinnedPool pinned_;  // before swap_: the images give their buffers back to it
  engine::SwapSpace<SwapImage> swap_;
  bool evict_for(const KvPages& need);  // drops LRU cache entries until need is free; false: cannot
  std::unique_ptr<cuda::DeviceModel> dm_;
  DeviceLoadStats load_;
  PrefixIndex prefix_;
  int32_t n_vocab_ = 0;
  KvShape shape_;
  std::string kv_name_;
};

}  // namespace oscar
