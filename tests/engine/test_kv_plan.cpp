// The page accounting a server admits by: pages_for_length against the pages a sequence
// really holds after each commit, segment usage, and plan_kv_cache's split of a byte
// budget (INT2 fits several times the sequences of BF16 in the same bytes).
#include <gtest/gtest.h>

#include "../tiny_model.h"
#include "../tiny_tokenizer.h"
#include "oscar/core/error.h"
#include "oscar/engine/cpu_runner.h"
#include "oscar/engine/generate.h"
#include "oscar/engine/kv_budget.h"

namespace oscar {
namespace {

Transformer tiny(const std::string& kv, int sink = 4, int recent = 8) {
  Transformer t(test::tiny_model(false, 5, 2, 64));
  t.configure_kv(test::tiny_kv_spec(kv, sink, recent));
  return t;
}

TEST(KvPages, PagesForLengthMatchWhatASequenceHolds) {
  for (const char* kv : {"bf16", "int2", "int4", "kivi2"}) {
    for (auto [sink, recent] : {std::pair{4, 8}, std::pair{16, 32}, std::pair{0, 5}, std::pair{21, 3}}) {
      Transformer t = tiny(kv, sink, recent);
      KvCache c = t.make_cache(2048);
      const SeqId s = c.add_sequence();
      const KvPages total = c.total_pages();
      std::vector<float> logits;
      for (int64_t len = 0; len < 150;) {
        const int64_t n = 1 + (len * 7) % 23;  // chunks of awkward sizes
        std::vector<int32_t> toks(size_t(n), 3);
        const KvPages need = c.reserve_need(s, n);
        const KvPages free0 = c.free_pages();
        t.forward(c, s, toks, LogitsFor::last, logits);
        len += n;
        const KvPages held{total.fp - c.free_pages().fp, total.history - c.free_pages().history};
        const KvPages want = c.pages_for_length(len);
        ASSERT_EQ(held.fp, want.fp) << kv << " sink " << sink << " recent " << recent << " at " << len;
        ASSERT_EQ(held.history, want.history) << kv << " sink " << sink << " recent " << recent << " at " << len;
        EXPECT_LE(free0.fp - c.free_pages().fp, need.fp);  // reserve_need is what reserve took (then commit released some)
        const KvSegmentUsage u = c.segment_usage();
        EXPECT_EQ(u.sink_pages + u.recent_pages, held.fp);
        EXPECT_EQ(u.history_pages, held.history);
      }
      c.remove_sequence(s);
      EXPECT_EQ(c.free_pages().fp, total.fp);
      EXPECT_EQ(c.free_pages().history, total.history);
    }
  }
}

TEST(KvPlan, SplitsABudgetAndCountsSequences) {
  Transformer bf16 = tiny("bf16", 16, 32), int2 = tiny("int2", 16, 32);
  const int64_t ctx = 512, budget = 8 << 20;
  const engine::KvPlan pb = engine::plan_kv_cache(bf16, budget, 4, ctx, 64);
  const engine::KvPlan pi = engine::plan_kv_cache(int2, budget, 64, ctx, 64);
  EXPECT_LE(pb.bytes, budget);
  EXPECT_LE(pi.bytes, budget);
  EXPECT_GT(pi.bytes, budget * 9 / 10);
  EXPECT_EQ(pb.pages.history, 0);
  const int64_t nb = engine::sequences_that_fit(bf16, pb, ctx), ni = engine::sequences_that_fit(int2, pi, ctx);
  EXPECT_EQ(nb, pb.pages.fp / (ctx / 16));
  EXPECT_GE(ni, 3 * nb) << "int2 " << ni << " vs bf16 " << nb;
  // Sequences that "fit" really do: fill the cache with them.
  KvCache c = int2.make_cache(pi.pages);
  std::vector<float> logits;
  std::vector<int32_t> toks(size_t(ctx), 1);
  for (int64_t i = 0; i < std::min<int64_t>(ni, 64); ++i) {
    const SeqId s = c.add_sequence();
    for (int64_t at = 0; at + 64 < ctx; at += 64) {  // in chunks, as the scheduler prefills
      ASSERT_TRUE(c.can_reserve(s, 64)) << "sequence " << i << " at " << at;
      int2.forward(c, s, std::span(toks).subspan(size_t(at), 64), LogitsFor::last, logits);
    }
  }
  EXPECT_THROW(engine::plan_kv_cache(bf16, 1 << 16, 1, ctx, 64), Error);  // cannot hold one sequence
}

TEST(Generate, OneLoopOnTheRunnerStopsWhenPagesRunOut) {
  Transformer t = tiny("bf16");
  engine::CpuRunner r(t, t.make_cache(KvPages{2, 0}));  // 32 tokens
  const SeqId s = r.add_sequence();
  std::vector<int32_t> prompt(20, 4);
  SamplerParams sp;
  sp.temperature = 0;
  Sampler sampler(sp);
  int n = 0;
  const Tokenizer tok = test::tiny_tokenizer();  // for is_eog: the tiny vocabulary has no such token
  const engine::GenerationStats st = engine::generate(r, tok, s, prompt, 100, sampler, [&](int32_t) { return ++n, true; });
  EXPECT_EQ(st.n_prompt, 20);
  EXPECT_EQ(r.length(s), 32);        // every page used
  EXPECT_EQ(st.n_generated, 13);     // 12 fed back + the last one sampled
}

}  // namespace
}  // namespace oscar
