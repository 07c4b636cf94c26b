// The decoder forward pass on the CPU for Llama / Qwen2 / Qwen3. One call runs a
// span of new tokens of one sequence (prefill when many, decode when one), appends
// their K/V to the cache and returns logits.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include <optional>

#include "oscar/kv/kv_cache.h"
#include "oscar/kv/rotation_set.h"
#include "oscar/model/kv_rotation.h"
#include "oscar/model/model_weights.h"
#include "oscar/ops/rope.h"

namespace oscar {

enum class LogitsFor { last, all };

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
  // What configure_kv chose: the rotations and, per layer, how K and V history rows are stored.
  const KvRotator& kv_rotator() const { return rotation_; }
  const HistoryFormat& k_history_format(int layer) const { return k_formats_[size_t(layer)]; }
  const HistoryFormat& v_history_format(int layer) const { return v_formats_[size_t(layer)]; }
  // [n_kv_heads · head_dim] what every key of `layer` has subtracted before it is cached, in
  // the cache's (rotated) basis: the rotations' k_mean under --k-mean; empty: nothing.
  const std::vector<float>& key_shift(int layer) const { return key_shift_[size_t(layer)]; }
  // [n_kv_heads · head_dim] the per-channel scale s of --k-scale (unrotated basis): keys are
  // divided by it and queries multiplied by it before R_K; empty: none. Under it key_shift
  // and the --k-bias-split rows are divided by s as well, so q·k stays exact.
  const std::vector<float>& key_scale(int layer) const { return key_scale_[size_t(layer)]; }
  // A cache in the configured format for `capacity_tokens` tokens.
  KvCache make_cache(int64_t capacity_tokens) const;
  void set_observer(ForwardObserver* obs) { observer_ = obs; }

  // Runs `tokens` at positions cache.length(seq) ... for sequence `seq`; reserves pages
  // (throws oscar::Error when the cache is full) and commits the tokens.
  // logits: [1, n_vocab] for LogitsFor::last, [n − logits_from, n_vocab] for LogitsFor::all
  // (rows for tokens logits_from … n − 1: perplexity needs only the scored half).
  void forward(KvCache& cache, SeqId seq, std::span<const int32_t> tokens, LogitsFor which,
               std::vector<float>& logits, int64_t logits_from = 0);

 private:
  void attention_block(KvCache& cache, SeqId seq, int layer, int64_t pos0, int64_t n);
  void mlp_block(int layer, int64_t n);
  // Grows layer's RoPE(b_k, p)·R_K table to n_positions rows (--k-bias-split).
  const float* key_bias_rows(int layer, int64_t n_positions);

  ModelWeights w_;
  RopeFreqs rope_;
  KvSpec kv_spec_;
  KvRotator rotation_;
  std::vector<HistoryFormat> k_formats_, v_formats_;
  ForwardObserver* observer_ = nullptr;
  // Per layer [positions, n_kv_heads, head_dim]: the K bias after RoPE at each position,
  // in the cache's basis; filled only for layers that split the bias off.
  std::vector<std::vector<float>> key_bias_;
  std::vector<std::vector<float>> key_shift_;  // per layer, see key_shift()
  std::vector<std::vector<float>> key_scale_;  // per layer, see key_scale()
  // Scratch, sized for the largest batch seen so far.
  std::vector<float> x_, h_, q_, k_, v_, att_, proj_, gate_, up_;
};

}  // namespace oscar
