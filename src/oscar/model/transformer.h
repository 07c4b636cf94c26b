// The decoder forward pass on the CPU for Llama / Qwen2 / Qwen3. One call runs a
// span of new tokens of one sequence (prefill when many, decode when one), appends
// their K/V to the cache and returns logits.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "oscar/kv/kv_cache.h"
#include "oscar/model/model_weights.h"
#include "oscar/ops/rope.h"

namespace oscar {

enum class LogitsFor { last, all };

class Transformer {
 public:
  explicit Transformer(ModelWeights weights);

  const ModelConfig& config() const { return w_.config; }
  const ModelWeights& weights() const { return w_; }
  KvShape kv_shape() const;

  // Runs `tokens` at positions cache.length(seq) ... for sequence `seq`; reserves pages
  // (throws oscar::Error when the cache is full) and commits the tokens.
  // logits: [1, n_vocab] for LogitsFor::last, [n, n_vocab] for LogitsFor::all.
  void forward(KvCache& cache, SeqId seq, std::span<const int32_t> tokens, LogitsFor which,
               std::vector<float>& logits);

 private:
  void attention_block(KvCache& cache, SeqId seq, int layer, int64_t pos0, int64_t n);
  void mlp_block(int layer, int64_t n);

  ModelWeights w_;
  RopeFreqs rope_;
  // Scratch, sized for the largest batch seen so far.
  std::vector<float> x_, h_, q_, k_, v_, att_, proj_, gate_, up_;
};

}  // namespace oscar
