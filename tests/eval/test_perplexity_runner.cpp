// perplexity() through a Runner (what `ppl` runs on the CPU and the GPU alike): the same
// statistics as scoring Transformer::forward(LogitsFor::all) by hand, chunk by chunk from an
// empty cache; and Batch::token_logits_from on the CpuRunner: a sequence's token logits in a
// batch beside another sequence equal those of a pass of it alone.
#include <gtest/gtest.h>

#include <cmath>

#include "../tiny_model.h"
#include "oscar/core/error.h"
#include "oscar/engine/cpu_runner.h"
#include "oscar/eval/perplexity.h"

namespace oscar {
namespace {

std::vector<int32_t> tokens_of(size_t n, int mul = 7) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t((i * size_t(mul) + 3) % 50);
  return t;
}

TEST(PerplexityRunner, SameAsScoringTheForwardByHand) {
  Transformer t(test::tiny_model(false, 21));
  t.configure_kv(test::tiny_kv_spec("int2", 4, 8));
  PerplexityOptions opt;
  opt.n_ctx = 32;
  const std::vector<int32_t> tokens = tokens_of(100);
  const PerplexityResult got = perplexity(t, tokens, opt);
  NllStats want;
  double bits = 0.0;
  for (int c = 0; c < 3; ++c) {
    KvCache cache = t.make_cache(32);
    const SeqId seq = cache.add_sequence();
    const std::span<const int32_t> chunk(tokens.data() + c * 32, 32);
    std::vector<float> logits;
    t.forward(cache, seq, chunk, LogitsFor::all, logits, 16);
    const size_t V = size_t(t.config().n_vocab);
    for (int j = 16; j <= 30; ++j)
      want.add(token_nll(std::span<const float>(logits.data() + size_t(j - 16) * V, V), chunk[size_t(j + 1)]));
    bits = cache.bits_per_element(seq);
  }
  EXPECT_EQ(got.n_chunks, 3);
  EXPECT_EQ(got.n_scored, want.count());
  EXPECT_DOUBLE_EQ(got.mean_nll, want.mean());
  EXPECT_DOUBLE_EQ(got.kv_bits_per_element, bits);
  EXPECT_LT(got.kv_bits_per_element, 16.0);  // int2 history is in the figure
  EXPECT_THROW(perplexity(t, tokens_of(20), opt), Error);  // fewer tokens than a chunk
}

TEST(PerplexityRunner, TokenLogitsInABatchEqualThePassAlone) {
  Transformer t(test::tiny_model(true, 23));
  t.configure_kv(test::tiny_kv_spec("int4", 4, 8));
  const std::vector<int32_t> a = tokens_of(40), b = tokens_of(25, 11);
  std::vector<float> want;
  {
    KvCache cache = t.make_cache(64);
    const SeqId s = cache.add_sequence();
    t.forward(cache, s, a, LogitsFor::all, want, 13);
  }
  engine::CpuRunner r(t, t.make_cache(128));
  const SeqId x = r.add_sequence(), y = r.add_sequence();
  engine::Batch batch;
  batch.add(y, 0, b);  // a sequence that asks for none beside it
  batch.add(x, 0, a, true, 13);
  engine::StepOutput out;
  r.run(batch, out);
  ASSERT_EQ(out.token_logits.size(), want.size());
  EXPECT_EQ(out.token_logits, want);
  // Its last row is also the batch's last-token logits of x (a matvec there, a product over
  // the rows here: equal to rounding).
  const size_t V = size_t(t.config().n_vocab);
  for (size_t j = 0; j < V; ++j)
    EXPECT_NEAR(out.logits[V + j], out.token_logits[out.token_logits.size() - V + j], 1e-4f) << j;
  batch.clear();
  batch.add(x, r.length(x), std::span<const int32_t>(a.data(), 1));
  r.run(batch, out);
  EXPECT_TRUE(out.token_logits.empty());
}

}  // namespace
}  // namespace oscar
