// perplexity() with the logits of each chunk computed elsewhere (PerplexityOptions::
// chunk_logits, what `ppl --device cuda` plugs in): the same statistics as the CPU forward
// when the function returns the same logits, and a refusal when it returns the wrong size.
#include <gtest/gtest.h>

#include "../tiny_model.h"
#include "oscar/core/error.h"
#include "oscar/eval/perplexity.h"

namespace oscar {
namespace {

std::vector<int32_t> tokens_of(size_t n) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t((i * 7 + 3) % 50);
  return t;
}

TEST(PerplexityChunkFn, SameAsTheCpuForward) {
  Transformer t(test::tiny_model(false, 21));
  PerplexityOptions opt;
  opt.n_ctx = 32;
  const std::vector<int32_t> tokens = tokens_of(100);
  const PerplexityResult want = perplexity(t, tokens, opt);
  int calls = 0;
  opt.chunk_logits = [&](std::span<const int32_t> chunk, int first, std::vector<float>& logits) -> int64_t {
    ++calls;
    KvCache cache = t.make_cache(int64_t(chunk.size()));
    const SeqId seq = cache.add_sequence();
    t.forward(cache, seq, chunk, LogitsFor::all, logits, first);
    return 1234;
  };
  const PerplexityResult got = perplexity(t, tokens, opt);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(got.n_scored, want.n_scored);
  EXPECT_DOUBLE_EQ(got.ppl, want.ppl);
  EXPECT_EQ(got.kv_bytes, 1234);
  // 8 · bytes / (2 · layers · KV heads · head_dim · n_ctx)
  const ModelConfig& c = t.config();
  EXPECT_DOUBLE_EQ(got.kv_bits_per_element, 8.0 * 1234 / (2.0 * c.n_layers * c.n_kv_heads * c.head_dim * 32));
}

TEST(PerplexityChunkFn, RefusesLogitsOfTheWrongSize) {
  Transformer t(test::tiny_model(false, 22));
  PerplexityOptions opt;
  opt.n_ctx = 16;
  opt.chunk_logits = [](std::span<const int32_t>, int, std::vector<float>& logits) -> int64_t {
    logits.assign(3, 0.0f);
    return 0;
  };
  EXPECT_THROW(perplexity(t, tokens_of(40), opt), Error);
}

}  // namespace
}  // namespace oscar
