// The engine against the independent NumPy reference (tests/reference/) on the real
// default model: tokens, logits, greedy generation and perplexity.
#include <cmath>

#include "golden.h"
#include "oscar/eval/perplexity.h"
#include "oscar/sampling/sampler.h"

namespace oscar {
namespace {

std::vector<float> run_logits(Transformer& m, const std::vector<int32_t>& ids, KvDtype dt, LogitsFor which) {
  KvSpec spec;
  spec.dtype = dt;
  m.configure_kv(spec);
  KvCache cache = m.make_cache(int64_t(ids.size()) + 64);
  const SeqId seq = cache.add_sequence();
  std::vector<float> logits;
  m.forward(cache, seq, ids, which, logits);
  return logits;
}

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

TEST(ReferenceSmolLM2, PromptTokensMatch) {
  OSCAR_NEED_GOLDEN(g);
  for (const auto& c : g->golden["cases"]) {
    const auto ids = g->tokenizer->encode(c["prompt"].get<std::string>(), false, true);
    EXPECT_EQ(ids, c["prompt_ids"].get<std::vector<int32_t>>()) << c["name"];
  }
}

// Logits of the last prompt position: relative L2 error ≤ 1e-3 with an exact (f32) KV
// cache; the BF16 cache adds its rounding, bounded at 1e-2.
TEST(ReferenceSmolLM2, LastLogitsMatch) {
  OSCAR_NEED_GOLDEN(g);
  for (const auto& c : g->golden["cases"]) {
    const auto ids = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = c["last_logits"].get<std::vector<float>>();
    const auto f32 = run_logits(*g->model, ids, KvDtype::f32, LogitsFor::last);
    const auto bf16 = run_logits(*g->model, ids, KvDtype::bf16, LogitsFor::last);
    const double e32 = relative_l2(f32, want), e16 = relative_l2(bf16, want);
    std::printf("%s: relative L2 error of logits: f32 KV %.2e, bf16 KV %.2e\n", c["name"].get<std::string>().c_str(),
                e32, e16);
    EXPECT_LE(e32, 1e-3);
    EXPECT_LE(e16, 1e-2);
    EXPECT_EQ(argmax(f32), argmax(want));
  }
}

// Every prompt position: the same top-1 token, and top-5 logits within 1e-2 absolute.
TEST(ReferenceSmolLM2, TopLogitsAtEveryPosition) {
  OSCAR_NEED_GOLDEN(g);
  const int64_t V = g->model->config().n_vocab;
  for (const auto& c : g->golden["cases"]) {
    const auto ids = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto all = run_logits(*g->model, ids, KvDtype::f32, LogitsFor::all);
    for (const auto& p : c["logits_positions"]) {
      const int64_t pos = p["pos"].get<int64_t>();
      const float* row = all.data() + pos * V;
      const auto top_ids = p["top_ids"].get<std::vector<int32_t>>();
      const auto top_logits = p["top_logits"].get<std::vector<float>>();
      EXPECT_EQ(argmax(std::span<const float>(row, size_t(V))), top_ids[0]) << c["name"] << " pos " << pos;
      for (size_t i = 0; i < top_ids.size(); ++i)
        EXPECT_NEAR(row[top_ids[i]], top_logits[i], 1e-2) << c["name"] << " pos " << pos << " rank " << i;
    }
  }
}

// 40 greedy tokens (end-of-text not special), decoding one token at a time through the
// default BF16 KV cache: the product path.
TEST(ReferenceSmolLM2, GreedyGenerationMatches) {
  OSCAR_NEED_GOLDEN(g);
  for (const auto& c : g->golden["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = c["greedy_ids"].get<std::vector<int32_t>>();
    g->model->configure_kv(KvSpec{});
    KvCache cache = g->model->make_cache(int64_t(prompt.size() + want.size()) + 8);
    const SeqId seq = cache.add_sequence();
    std::vector<float> logits;
    g->model->forward(cache, seq, prompt, LogitsFor::last, logits);
    std::vector<int32_t> got;
    for (size_t i = 0; i < want.size(); ++i) {
      got.push_back(argmax(logits));
      const int32_t one[1] = {got.back()};
      g->model->forward(cache, seq, one, LogitsFor::last, logits);
    }
    EXPECT_EQ(got, want) << c["name"];
    EXPECT_EQ(g->tokenizer->decode(got, true), c["greedy_text"].get<std::string>());
  }
}

// Perplexity over the same token chunks (eval-protocol conventions) within 0.5 %.
TEST(ReferenceSmolLM2, PerplexityMatches) {
  OSCAR_NEED_GOLDEN(g);
  const auto& gj = g->golden;
  std::vector<int32_t> tokens;
  for (const auto& chunk : gj["ppl_token_ids"])
    for (int32_t id : chunk.get<std::vector<int32_t>>()) tokens.push_back(id);
  // Our tokenizer gives the same ids for the text.
  std::ifstream in(std::string(OSCAR_SOURCE_DIR) + "/" + gj["ppl_text_file"].get<std::string>(), std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto ids = g->tokenizer->encode(text, false, false);
  ASSERT_GE(ids.size(), tokens.size());
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), ids.begin()));
  EXPECT_EQ(int64_t(ids.size()), gj["ppl_text_n_tokens"].get<int64_t>());

  PerplexityOptions opt;
  opt.n_ctx = gj["ppl_ctx"].get<int>();
  for (KvDtype dt : {KvDtype::f32, KvDtype::bf16}) {
    KvSpec spec;
    spec.dtype = dt;
    g->model->configure_kv(spec);
    const PerplexityResult r = perplexity(*g->model, tokens, opt);
    const double want = gj["ppl"].get<double>();
    std::printf("ppl (%s KV) = %.4f +/- %.4f, reference %.4f +/- %.4f\n", g->model->kv_spec().name().c_str(), r.ppl, r.ppl_stderr,
                want, gj["ppl_stderr"].get<double>());
    EXPECT_EQ(r.n_chunks, gj["ppl_chunks"].get<int>());
    EXPECT_EQ(r.n_scored, int64_t(r.n_chunks) * gj["ppl_scored_per_chunk"].get<int64_t>());
    EXPECT_NEAR(r.ppl, want, 0.005 * want);
    EXPECT_NEAR(r.ppl_stderr, gj["ppl_stderr"].get<double>(), 0.01 * gj["ppl_stderr"].get<double>());
    const auto chunk_nll = gj["ppl_chunk_nll"].get<std::vector<double>>();
    for (size_t i = 0; i < chunk_nll.size(); ++i) EXPECT_NEAR(r.chunk_mean_nll[i], chunk_nll[i], 5e-3) << "chunk " << i;
  }
}

}  // namespace
}  // namespace oscar
