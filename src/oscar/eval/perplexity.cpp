#include "oscar/eval/perplexity.h"

#include <cmath>

#include "oscar/core/error.h"
#include "oscar/engine/cpu_runner.h"

namespace oscar {

double NllStats::ppl() const { return std::exp(mean()); }

double NllStats::ppl_stderr() const {
  if (n_ < 2) return 0.0;
  const double m = mean();
  const double var = std::max(0.0, sum2_ / double(n_) - m * m);
  return std::sqrt(var / double(n_ - 1)) * ppl();
}

double token_nll(std::span<const float> logits, int32_t target) {
  OSCAR_CHECK(target >= 0 && size_t(target) < logits.size(), "target {} outside vocab {}", target, logits.size());
  double m = logits[0];
  for (float x : logits) m = std::max(m, double(x));
  double sum = 0.0;
  for (float x : logits) sum += std::exp(double(x) - m);
  return -(double(logits[size_t(target)]) - m - std::log(sum));
}

std::vector<int32_t> perplexity_chunks(std::span<const int32_t> tokens, const PerplexityOptions& opt) {
  const int N = opt.n_ctx;
  int n_chunks = int(int64_t(tokens.size()) / N);
  if (opt.max_chunks >= 0) n_chunks = std::min(n_chunks, opt.max_chunks);
  std::vector<int32_t> out(tokens.begin(), tokens.begin() + int64_t(n_chunks) * N);
  if (opt.bos_id >= 0)
    for (int c = 0; c < n_chunks; ++c) out[size_t(int64_t(c) * N)] = opt.bos_id;
  return out;
}

PerplexityResult perplexity(engine::Runner& runner, std::span<const int32_t> tokens, const PerplexityOptions& opt,
                            const std::function<void(int, const NllStats&)>& on_chunk,
                            const ScoredPositionFn& on_scored) {
  const int N = opt.n_ctx;
  if (N < 4) fail("perplexity context {} is too small (need at least 4)", N);
  int n_chunks = int(int64_t(tokens.size()) / N);
  if (opt.max_chunks >= 0) n_chunks = std::min(n_chunks, opt.max_chunks);
  if (n_chunks == 0) fail("text has {} tokens, fewer than one chunk of {}: use a longer file or a smaller -c", tokens.size(), N);

  const int64_t n_vocab = runner.n_vocab();
  const KvShape shape = runner.kv_shape();
  NllStats stats;
  PerplexityResult r;
  r.n_ctx = N;
  engine::Batch batch;
  engine::StepOutput out;
  std::vector<int32_t> chunk(static_cast<size_t>(N));
  for (int c = 0; c < n_chunks; ++c) {
    std::copy_n(tokens.begin() + int64_t(c) * N, N, chunk.begin());
    if (opt.bos_id >= 0) chunk[0] = opt.bos_id;
    const int first = N / 2;  // only the scored half needs logits (the LM head is large)
    const SeqId seq = runner.add_sequence();
    batch.clear();
    batch.add(seq, 0, chunk, /*want_logits=*/false, first);
    try {
      runner.run(batch, out);
    } catch (...) {
      runner.free_sequence(seq);
      throw;
    }
    r.kv_bytes = runner.kv_bytes(seq);
    r.kv_bits_per_element = 8.0 * double(r.kv_bytes) / (2.0 * shape.n_layers * shape.n_kv_heads * shape.head_dim * double(N));
    runner.free_sequence(seq);
    const std::vector<float>& logits = out.token_logits;
    OSCAR_CHECK(logits.size() == size_t(N - first) * size_t(n_vocab), "chunk logits have the wrong size");
    NllStats chunk_stats;
    for (int j = N / 2; j <= N - 2; ++j) {
      const std::span<const float> row(logits.data() + int64_t(j - first) * n_vocab, size_t(n_vocab));
      const double nll = token_nll(row, chunk[size_t(j + 1)]);
      if (on_scored) on_scored(row, chunk[size_t(j + 1)]);
      stats.add(nll);
      chunk_stats.add(nll);
    }
    r.chunk_mean_nll.push_back(chunk_stats.mean());
    if (on_chunk) on_chunk(c, stats);
  }
  r.n_chunks = n_chunks;
  r.n_scored = stats.count();
  r.mean_nll = stats.mean();
  r.ppl = stats.ppl();
  r.ppl_stderr = stats.ppl_stderr();
  return r;
}

PerplexityResult perplexity(Transformer& model, std::span<const int32_t> tokens, const PerplexityOptions& opt,
                            const std::function<void(int, const NllStats&)>& on_chunk,
                            const ScoredPositionFn& on_scored) {
  engine::CpuRunner runner(model, model.make_cache(std::max(opt.n_ctx, 1)));
  return perplexity(runner, tokens, opt, on_chunk, on_scored);
}

}  // namespace oscar
