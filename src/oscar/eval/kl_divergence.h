// KL divergence of a KV format's next-token distributions against a base run, the way
// llama-perplexity does it: one run (BF16 KV) stores, for every scored position, the
// full-vocabulary log-probabilities; a later run over the same tokens compares.
//
// Base file ("OSCARKLD", little-endian):
//   header: char magic[8], u32 version = 1, u32 n_ctx, u32 n_vocab, u32 n_chunks
//   i32 tokens[n_chunks · n_ctx]          (the chunks as evaluated, BOS substituted)
//   rows, one per scored position (n_ctx/2 … n_ctx−2 of each chunk, in order):
//     f32 lp_min, f32 lp_step, i32 argmax, u16 q[n_vocab]
//     log p_i ≈ lp_min + lp_step · q_i    (log p below lp_min, at most 1e-16, is stored as lp_min)
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "oscar/core/mapped_file.h"

namespace oscar {

// Bytes of one stored row for a vocabulary.
int64_t kld_row_bytes(int64_t n_vocab);
// log-softmax of logits (double), quantized into one row.
void encode_log_probs(std::span<const float> logits, uint8_t* row);
// The row's log-probabilities.
void decode_log_probs(const uint8_t* row, int64_t n_vocab, double* log_probs);
int32_t row_argmax(const uint8_t* row);

// KL(softmax(ref) ‖ softmax(test)) of every row, from raw logits [n_rows, n_vocab] each, in
// double (for paired comparisons of two formats). 0 for identical rows; throws oscar::Error
// for mismatched sizes.
std::vector<double> row_kl_divergences(std::span<const float> ref_logits, std::span<const float> test_logits,
                                       int64_t n_vocab);

class KldBaseWriter {
 public:
  // Creates the file and writes the header and tokens. Throws oscar::Error.
  KldBaseWriter(const std::string& path, int n_ctx, int n_vocab, int n_chunks, std::span<const int32_t> tokens);
  ~KldBaseWriter();
  KldBaseWriter(const KldBaseWriter&) = delete;
  KldBaseWriter& operator=(const KldBaseWriter&) = delete;
  void add(std::span<const float> logits);  // next scored position
  void finish();                            // checks the row count, flushes, closes

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  int64_t n_vocab_ = 0, rows_expected_ = 0, rows_ = 0;
  std::vector<uint8_t> row_;
};

class KldBaseReader {
 public:
  // Maps and validates the file (magic, version, sizes). Throws oscar::Error naming it.
  explicit KldBaseReader(const std::string& path);
  int n_ctx() const { return n_ctx_; }
  int n_vocab() const { return n_vocab_; }
  int n_chunks() const { return n_chunks_; }
  std::span<const int32_t> tokens() const { return tokens_; }
  int64_t n_rows() const { return n_rows_; }
  const uint8_t* row(int64_t i) const;

 private:
  MappedFile file_;
  int n_ctx_ = 0, n_vocab_ = 0, n_chunks_ = 0;
  int64_t n_rows_ = 0;
  std::vector<int32_t> tokens_;
  const uint8_t* rows_ = nullptr;
};

// Scored positions per chunk of n_ctx tokens (llama-perplexity's second half).
inline int64_t kld_rows_per_chunk(int n_ctx) { return n_ctx - 1 - n_ctx / 2; }

struct KldSummary {
  int64_t n = 0;
  double mean = 0, mean_stderr = 0, median = 0, p99 = 0, p999 = 0, max = 0;
  double same_top1 = 0, same_top1_stderr = 0;  // fractions
  double ppl = 0, ppl_base = 0;
  double ppl_ratio = 0, ppl_ratio_stderr = 0;  // exp(mean(nll − nll_base)), paired
};

// Accumulates per-position KL(P_base ‖ P), top-1 agreement and both NLLs.
class KldStats {
 public:
  // logits of this run at one scored position, the base row there, and the target token.
  void add(std::span<const float> logits, const uint8_t* base_row, int32_t target);
  KldSummary summary() const;

 private:
  std::vector<double> kld_, nll_, nll_base_;
  int64_t same_top1_ = 0;
  std::vector<double> base_lp_;  // scratch
};

}  // namespace oscar
