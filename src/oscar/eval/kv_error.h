// Per-layer error of attention over a KV cache format, measured in isolation: the q, k
// and v one unquantized forward pass produced are pushed through a one-layer cache in
// the format under test and through an f32 cache, and the relative L2 error of the two
// attention outputs is that layer's error. Every format sees the same inputs (teacher
// forcing), so one layer's error does not feed the next and layers can be compared.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "oscar/attention/attention.h"
#include "oscar/kv/history_format.h"
#include "oscar/kv/kv_spec.h"
#include "oscar/model/kv_rotation.h"
#include "oscar/model/transformer.h"

namespace oscar {

// One layer's attention inputs after RoPE, before any KV rotation.
struct LayerQkv {
  std::vector<float> q;  // [n, n_heads, d]
  std::vector<float> k;  // [n, n_kv_heads, d]
  std::vector<float> v;  // [n, n_kv_heads, d]
};

// Keeps what a forward pass shows the observer, every layer, appended across calls.
class QkvRecorder : public ForwardObserver {
 public:
  QkvRecorder(int n_layers, const AttentionShape& shape);
  void on_attention_inputs(int layer, int64_t n, const float* q, const float* k, const float* v) override;
  const LayerQkv& layer(int l) const { return layers_[size_t(l)]; }
  int64_t tokens(int l) const;

 private:
  AttentionShape shape_;
  std::vector<LayerQkv> layers_;
};

// A KV format as one layer of the model sees it: the spec, that layer's history formats
// (null when the spec keeps no history) and the rotator with the layer's rotation
// (R_V must not be absorbed: the recorded v is the unrotated projection).
struct LayerKvFormat {
  KvSpec spec;
  const HistoryFormat* k_format = nullptr;
  const HistoryFormat* v_format = nullptr;
  const KvRotator* rotator = nullptr;
  int layer = 0;  // which of the rotator's layers to use
  // --k-bias-split: [n_tokens, n_kv_heads, d] RoPE(b_k, p) rows (unrotated), kept out of
  // the cache and added back at attention time; null: off.
  const float* k_bias_rows = nullptr;
  // --k-mean: [n_kv_heads, d] (unrotated) subtracted from every key before it is cached;
  // null: off.
  const float* k_mean = nullptr;
  // --k-scale: [n_kv_heads, d] (unrotated) keys divided by it, queries multiplied by it before
  // the rotation (k_mean and k_bias_rows are then divided by it too); null: off.
  const float* k_scale = nullptr;
};

struct CachedAttention {
  std::vector<float> out;         // [n_queries, n_heads, d], back in the unrotated basis
  double bits_per_element = 0.0;  // the one-layer cache's effective bits at n_tokens
};

// Writes the first n_tokens rows of x into a cache of format f the way the model does
// (rotate, write, demote) and runs prefill attention for the last n_queries of them.
CachedAttention cached_attention(const AttentionShape& s, const LayerQkv& x, int64_t n_tokens, int64_t n_queries,
                                 const LayerKvFormat& f);

// Per-layer errors of whole KV specs on one recorded pass: the f32 reference outputs and
// the RoPE(b_k, p) rows (for --k-bias-split) are computed once, then any number of specs
// (or one layer of a spec, as a clip or precision search needs) are measured against them.
class KvErrorProbe {
 public:
  KvErrorProbe(const Transformer& model, const QkvRecorder& rec, int64_t n_tokens, int64_t n_queries);

  struct LayerResult {
    double error = 0.0;  // relative L2 of the attention output against f32
    double bits = 0.0;   // the one-layer cache's effective bits per element at n_tokens
    double history_bits = 0.0;  // bits per element of its history rows (K and V mean): the long-context cost
  };
  // Layer l of `spec` (with --kv-layers, that layer's type). rs: the rotations, needed
  // when the layer is calibrated (its clip ratios are rs's).
  LayerResult layer(const KvSpec& spec, const RotationSet* rs, int l) const;
  std::vector<LayerResult> all_layers(const KvSpec& spec, const RotationSet* rs) const;

  int64_t n_tokens() const { return n_; }
  int64_t n_queries() const { return queries_; }

 private:
  const Transformer& model_;
  const QkvRecorder& rec_;
  int64_t n_, queries_;
  AttentionShape shape_;
  std::vector<std::vector<float>> reference_;  // per layer [n_queries, n_heads, d]
  std::vector<std::vector<float>> bias_rows_;  // per layer [n, n_kv_heads, d]; empty: no K bias
};

// ‖a − ref‖₂ / ‖ref‖₂ in double; 0 when both are zero.
double relative_l2_error(std::span<const float> a, std::span<const float> ref);

}  // namespace oscar
