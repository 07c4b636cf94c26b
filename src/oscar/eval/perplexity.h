// Perplexity the way llama-perplexity computes it (../shared/eval-protocol.md):
// consecutive chunks of n_ctx tokens, each from an empty KV cache; only the second
// half of each chunk is scored; the ± is the standard error of the mean NLL carried
// through exp. The KV format is the model's (Transformer::configure_kv).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "oscar/engine/runner.h"
#include "oscar/kv/kv_spec.h"
#include "oscar/model/transformer.h"

namespace oscar {

struct PerplexityOptions {
  int n_ctx = 512;
  int max_chunks = -1;      // -1: all whole chunks
  int32_t bos_id = -1;      // when >= 0, the first token of each chunk is replaced by BOS
};

struct PerplexityResult {
  int n_ctx = 0;
  int n_chunks = 0;
  int64_t n_scored = 0;     // tokens scored in total
  double mean_nll = 0.0;
  double ppl = 0.0;
  double ppl_stderr = 0.0;
  std::vector<double> chunk_mean_nll;  // per chunk
  double kv_bits_per_element = 0.0;    // the cache's effective bits per K/V element at n_ctx tokens
  int64_t kv_bytes = 0;                // and its size in bytes (one sequence of n_ctx tokens)
};

// Running statistics of per-token negative log-likelihoods.
class NllStats {
 public:
  void add(double nll) { sum_ += nll; sum2_ += nll * nll; ++n_; }
  int64_t count() const { return n_; }
  double mean() const { return n_ ? sum_ / double(n_) : 0.0; }
  double ppl() const;
  double ppl_stderr() const;  // σ/√(n−1) · PPL

 private:
  double sum_ = 0.0, sum2_ = 0.0;
  int64_t n_ = 0;
};

// −log softmax(logits)[target], computed in double.
double token_nll(std::span<const float> logits, int32_t target);

// Sees every scored position: its logits and the token it predicts (the KL-divergence
// mode stores or compares these).
using ScoredPositionFn = std::function<void(std::span<const float> logits, int32_t target)>;

// Each chunk is one sequence of `runner` (CPU or GPU alike), run as one batch that asks for
// the logits of its scored half (Batch::token_logits_from) and freed afterwards.
// Calls on_chunk(chunk_index, running_stats) after each chunk (for llama-style progress).
// Throws oscar::Error when the text holds fewer tokens than one chunk.
PerplexityResult perplexity(engine::Runner& runner, std::span<const int32_t> tokens, const PerplexityOptions& opt,
                            const std::function<void(int, const NllStats&)>& on_chunk = {},
                            const ScoredPositionFn& on_scored = {});
// The same on the CPU: `model` through a CpuRunner with a cache of one chunk.
PerplexityResult perplexity(Transformer& model, std::span<const int32_t> tokens, const PerplexityOptions& opt,
                            const std::function<void(int, const NllStats&)>& on_chunk = {},
                            const ScoredPositionFn& on_scored = {});

// The tokens of the chunks perplexity() evaluates, BOS substituted as it does.
std::vector<int32_t> perplexity_chunks(std::span<const int32_t> tokens, const PerplexityOptions& opt);

}  // namespace oscar
