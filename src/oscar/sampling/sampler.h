// Next-token sampling over a logit vector, in llama.cpp's default order:
// repetition penalty -> top-k -> top-p -> min-p -> temperature -> seeded draw.
// Deterministic for a given seed, logits and history.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace oscar {

struct SamplerParams {
  float temperature = 0.8f;     // <= 0: greedy (argmax after the repetition penalty)
  int top_k = 40;               // 0: off
  float top_p = 0.95f;          // in (0, 1]; 1: off
  float min_p = 0.05f;          // in [0, 1]; 0: off (relative to the most likely token)
  float repeat_penalty = 1.0f;  // > 0; 1: off
  int repeat_last_n = 64;       // history tokens the penalty looks at; 0: off, -1: all
  uint64_t seed = 0x05ca7ULL;

  // Throws oscar::Error naming the first invalid parameter.
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(SamplerParams p);  // validates p

  // `logits`: [n_vocab]; `history`: token ids generated/seen so far (most recent last).
  // Throws oscar::Error on empty or NaN logits, or a history id outside the vocabulary.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  void reset(uint64_t seed);
  const SamplerParams& params() const { return params_; }

 private:
  struct Candidate { float logit; int32_t id; };
  std::span<const float> apply_penalty(std::span<const float> logits, std::span<const int32_t> history);
  void select_top_k(std::span<const float> l);
  void apply_top_p_min_p();
  void keep_top_p(float max_logit);
  int32_t draw();

  SamplerParams params_;
  std::mt19937_64 rng_;
  std::vector<Candidate> cand_;   // [<= n_vocab] surviving tokens; reused between calls
  std::vector<float> penalized_;  // [n_vocab] logits after the repetition penalty
  std::vector<double> hist_;      // [n_buckets] top-p: candidate mass per logit bucket
};

// Index of the largest logit; the lowest index on ties. Throws on empty input.
int32_t argmax(std::span<const float> logits);

}  // namespace oscar
