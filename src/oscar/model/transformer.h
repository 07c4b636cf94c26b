// The decoder forward pass on the CPU for Llama / Qwen2 / Qwen3. One call runs a
// span of new tokens of one sequence (prefill when many, decode when one), appends
// their K/V to the cache and returns logits.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <optional>

#include "oscar/attention/key_bias.h"
#include "oscar/kv/kv_cache.h"
#include "oscar/kv/kv_format.h"
#include "oscar/rotation/rotation_set.h"
#include "oscar/model/kv_rotation.h"
#include "oscar/model/model_weights.h"
#include "oscar/ops/rope.h"

namespace oscar {

enum class LogitsFor { last, all };

// One sequence's new tokens in a batched forward pass (positions cache.length(seq) ...).
struct SeqTokens {
  SeqId seq = 0;
  std::span<const int32_t> tokens;
};

// Sees the attention inputs of every layer after RoPE (and q/k norm), before any KV
// rotation: what calibration accumulates. q: [n, n_heads, d]; k, v: [n, n_kv_heads, d].
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  virtual void on_attention_inputs(int layer, int64_t n, const float* q, const float* k, const float* v) = 0;
};

class Transformer {
 public:
  explicit Transformer(ModelWeights weights);

  const ModelConfig& config() const { return w_.config; }
  const ModelWeights& weights() const { return w_; }
  KvShape kv_shape() const;

  // Chooses the KV format: rotations (Hadamard, or a calibrated set whose R_V is then
  // absorbed into W_v / W_o unless absorb_v is false) and the per-layer history formats.
  // Call once, before any forward pass. Throws oscar::Error on a mismatch.
  void configure_kv(const KvSpec& spec, const RotationSet* rotations = nullptr, bool absorb_v = true);
  const KvSpec& kv_spec() const { return kv_spec_; }
  // What configure_kv chose, as the format both engines run (the device takes it as it is).
  const KvFormat& kv_format() const { return kv_format_; }
  // The same, as the CPU runs it: the rotations and, per layer, how K and V history rows
  // are stored (codec parameters of kv_format()'s codes).
  const KvRotator& kv_rotator() const { return rotation_; }
  const HistoryFormat& k_history_format(int layer) const { return k_formats_[size_t(layer)]; }
  const HistoryFormat& v_history_format(int layer) const { return v_formats_[size_t(layer)]; }
  // [n_kv_heads · head_dim] what every key of `layer` has subtracted before it is cached, in
  // the cache's (rotated) basis: the rotations' k_mean under --k-mean; empty: nothing.
  const std::vector<float>& key_shift(int layer) const { return KvFormat::of_layer(kv_format_.k_shift, layer); }
  // [n_kv_heads · head_dim] the per-channel scale s of --k-scale (unrotated basis): keys are
  // divided by it and queries multiplied by it before R_K; empty: none. Under it key_shift
  // and the --k-bias-split rows are divided by s as well, so q·k stays exact.
  const std::vector<float>& key_scale(int layer) const { return KvFormat::of_layer(kv_format_.k_scale, layer); }
  // A cache in the configured format for `capacity_tokens` tokens.
  KvCache make_cache(int64_t capacity_tokens) const;
  KvCache make_cache(KvPages pages) const;  // exactly these pages of each pool
  void set_observer(ForwardObserver* obs) { observer_ = obs; }

  // Runs `tokens` at positions cache.length(seq) ... for sequence `seq`; reserves pages
  // (throws oscar::Error when the cache is full) and commits the tokens.
  // logits: [1, n_vocab] for LogitsFor::last, [n − logits_from, n_vocab] for LogitsFor::all
  // (rows for tokens logits_from … n − 1: perplexity needs only the scored half).
  void forward(KvCache& cache, SeqId seq, std::span<const int32_t> tokens, LogitsFor which,
               std::vector<float>& logits, int64_t logits_from = 0);

  // Several sequences in one pass (continuous batching): the matrix products run over all
  // rows at once, attention per sequence. Sequences with one token (decode) go through
  // qmat::linear_decode, which gives each row bit for bit what a pass of that sequence alone
  // gives; longer spans (prefill chunks) go through qmat::linear. Reserves every sequence's
  // pages first: when they do not all fit it throws oscar::Error with nothing changed.
  // logits: [seqs.size(), n_vocab], the last token of each sequence, in the order given.
  // token_logits_from (empty, or one per sequence): k ≥ 0 also gives that sequence's tokens
  // k … n − 1 their logits in token_logits, in order (as forward's LogitsFor::all).
  void forward_batch(KvCache& cache, std::span<const SeqTokens> seqs, std::vector<float>& logits,
                     std::span<const int64_t> token_logits_from = {}, std::vector<float>* token_logits = nullptr);

 private:
  // A sequence's rows in this pass: rows [row0, row0 + n) at positions pos0 ...
  struct RowSpan {
    SeqId seq = 0;
    int64_t row0 = 0, n = 0, pos0 = 0;
  };
  void check_cache(const KvCache& cache) const;
  // kv_format_ from kv_spec_, rotation_ and the history formats, with these key shifts and
  // scales (one per layer, empty for none).
  void set_kv_format(std::vector<std::vector<float>> k_shift, std::vector<std::vector<float>> k_scale);
  // What forward and forward_batch share: checks the tokens, reserves every sequence's pages
  // (all or none), lays the rows out in spans_ (decode spans first) and embeds them into x_.
  // Returns each sequence's last row, in the order given.
  std::vector<int64_t> begin_pass(KvCache& cache, std::span<const SeqTokens> seqs);
  void run_layers(KvCache& cache);
  void attention_block(KvCache& cache, int layer);
  void mlp_block(int layer);
  // y[rows, n] = x · wᵀ (+ bias) over this pass's rows: decode rows by linear_decode (each
  // row as it would be alone), the rest (prefill chunks) by linear.
  void linear(const float* x, const WeightMatrix& w, const float* bias, float* y) const;
  // The layer's split-off key part RoPE(b_k, t) in the cache's basis (--k-bias-split), built
  // on first use (after the rotations and key scales are set).
  const KeyBias& layer_key_bias(int layer);

  ModelWeights w_;
  RopeFreqs rope_;
  KvSpec kv_spec_;
  KvRotator rotation_;
  std::vector<HistoryFormat> k_formats_, v_formats_;
  ForwardObserver* observer_ = nullptr;
  std::vector<std::unique_ptr<KeyBias>> key_bias_;  // per layer; only layers that split the bias off
  std::vector<float> key_add_;  // this span's a_t rows: [positions, n_kv_heads, head_dim]
  KvFormat kv_format_;
  std::vector<RowSpan> spans_;  // this pass: decode spans (n = 1) first, then the others
  int64_t n_rows_ = 0, n_decode_rows_ = 0;
  // Scratch, sized for the largest batch seen so far.
  std::vector<float> x_, h_, q_, k_, v_, att_, proj_, gate_, up_;
};

}  // namespace oscar
