// The prefix cache on a tiny random model with a mixed INT2 cache (sink 16, recent 32:
// whole pages) and bf16:
//  * a hit attaches whole pages and the sequence then holds, for the prefix, exactly the
//    bytes (fp rows and packed history rows) a from-scratch computation writes, and its
//    greedy continuation is the same tokens;
//  * pages are shared by reference: removing every sequence leaves only cache-held pages,
//    which a reserve evicts (LRU) when it needs them;
//  * a prefix whose recent-window pages were released (registered late) attaches only what
//    its windows allow.
#include <gtest/gtest.h>

#include <cmath>

#include "../tiny_model.h"
#include "oscar/core/error.h"
#include "oscar/model/transformer.h"
#include "oscar/sampling/sampler.h"

namespace oscar {
namespace {

Transformer tiny(const std::string& kv) {
  Transformer t(test::tiny_model(true, 21, 2, 32));
  t.configure_kv(test::tiny_kv_spec(kv, 16, 32, 32));
  return t;
}

std::vector<int32_t> prompt(uint64_t seed, size_t n) {
  std::vector<int32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = int32_t((seed * 131 + i * 17 + (i * i) % 7) % 50);
  return p;
}

// Greedy tokens after feeding `rest` to `seq`.
std::vector<int32_t> greedy(Transformer& t, KvCache& c, SeqId seq, std::span<const int32_t> rest, int n) {
  std::vector<float> logits;
  t.forward(c, seq, rest, LogitsFor::last, logits);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t id = argmax(logits);
    out.push_back(id);
    t.forward(c, seq, std::span<const int32_t>(&id, 1), LogitsFor::last, logits);
  }
  return out;
}

// Every row a sequence holds for tokens [0, n): fp rows and dequantized history rows.
std::vector<float> rows_of(const KvCache& c, SeqId seq, int64_t n) {
  const KvShape& s = c.shape();
  std::vector<float> all;
  std::vector<float> k(size_t(n * s.head_dim)), v(k.size());
  for (int l = 0; l < s.n_layers; ++l)
    for (int h = 0; h < s.n_kv_heads; ++h) {
      c.gather_fp(l, seq, h, n, k.data(), v.data());
      all.insert(all.end(), k.begin(), k.end());
      all.insert(all.end(), v.begin(), v.end());
      if (c.spec().quantized()) {
        c.gather_history(l, seq, h, n, k.data(), v.data());
        all.insert(all.end(), k.begin(), k.end());
        all.insert(all.end(), v.begin(), v.end());
      }
    }
  return all;
}

class PrefixCache : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixCache, HitEqualsMissBytesAndTokens) {
  Transformer t = tiny(GetParam());
  const std::vector<int32_t> a = prompt(1, 150);
  std::vector<float> logits;
  // From scratch, no prefix cache: the prompt in chunks of 64.
  KvCache scratch = t.make_cache(4096);
  const SeqId z = scratch.add_sequence();
  for (size_t at = 0; at < a.size(); at += 64)
    t.forward(scratch, z, std::span(a).subspan(at, std::min<size_t>(64, a.size() - at)), LogitsFor::last, logits);
  // The server's way: a first request computes the prompt (same chunks) and registers it.
  KvCache c = t.make_cache(4096);
  c.enable_prefix_cache("test");
  const SeqId x = c.add_sequence();
  for (size_t at = 0; at < a.size(); at += 64)
    t.forward(c, x, std::span(a).subspan(at, std::min<size_t>(64, a.size() - at)), LogitsFor::last, logits);
  c.register_prefix(x, a);
  // A second request with the same prompt, and one that shares its first 100 tokens.
  const SeqId y = c.add_sequence();
  const int64_t hit = c.attach_prefix(y, a);
  EXPECT_EQ(hit, 144);  // whole pages, one token left to compute
  EXPECT_EQ(rows_of(c, y, hit), rows_of(scratch, z, hit)) << "the attached pages hold other bytes";
  KvCache again = t.make_cache(4096);
  const SeqId w = again.add_sequence();
  for (size_t at = 0; at + 64 < a.size(); at += 64) t.forward(again, w, std::span(a).subspan(at, 64), LogitsFor::last, logits);
  const std::vector<int32_t> miss = greedy(t, again, w, std::span(a).subspan(128), 24);
  const std::vector<int32_t> got = greedy(t, c, y, std::span(a).subspan(size_t(hit)), 24);
  EXPECT_EQ(got, miss);
  std::vector<int32_t> b = a;
  b.resize(100);
  b.push_back(7);
  const SeqId u = c.add_sequence();
  // bf16: 96 tokens. INT2: at 96 the sequence would need fp rows for [64, 96), which the
  // first one has as history only since its window moved past them: the sink is what fits.
  const bool int2 = GetParam() == "int2";
  EXPECT_EQ(c.attach_prefix(u, b), int2 ? 16 : 96);
  const PrefixCacheStats st = c.prefix_stats();
  EXPECT_EQ(st.hits, 9 + (int2 ? 1 : 6));
  EXPECT_EQ(st.queries, 9 + 6);
  // Shared pages: dropping the sequences leaves only what the cache holds.
  c.remove_sequence(x);
  c.remove_sequence(y);
  c.remove_sequence(u);
  const KvSegmentUsage use = c.segment_usage();
  EXPECT_EQ(use.sink_pages + use.recent_pages + use.history_pages, 0);
  EXPECT_GT(use.cached_fp_pages, 0);
  EXPECT_EQ(c.free_pages().fp, c.total_pages().fp);  // cache-held pages count as free
  EXPECT_EQ(c.free_pages().history, c.total_pages().history);
}

TEST_P(PrefixCache, EvictsLeastRecentlyUsedWhenPagesRunOut) {
  Transformer t = tiny(GetParam());
  KvCache c = t.make_cache(KvPages{24, 40});
  c.enable_prefix_cache("test");
  std::vector<float> logits;
  for (uint64_t i = 0; i < 6; ++i) {  // each 200 tokens: more than the pages can keep at once
    const std::vector<int32_t> p = prompt(10 + i, 200);
    const SeqId s = c.add_sequence();
    for (size_t at = 0; at < p.size(); at += 40) {
      ASSERT_TRUE(c.can_reserve(s, 40)) << "prompt " << i << " at " << at;
      t.forward(c, s, std::span(p).subspan(at, 40), LogitsFor::last, logits);
    }
    c.register_prefix(s, p);
    c.remove_sequence(s);
  }
  // The newest prompt is still there whole; the oldest lost pages to eviction.
  const SeqId s = c.add_sequence();
  EXPECT_EQ(c.attach_prefix(s, prompt(15, 200)), 192);
  c.remove_sequence(s);
  const SeqId s0 = c.add_sequence();
  EXPECT_LT(c.attach_prefix(s0, prompt(10, 200)), 64);
}

// A prefix loses its deepest blocks first (registered and attached deepest first, so its
// first block is its most recently used): what eviction leaves of it still attaches. Had
// eviction taken its first block, the rest would be unreachable and nothing would attach.
// This is what keeps a preempted sequence's pages useful (the scheduler registers them).
TEST_P(PrefixCache, EvictsAPrefixFromItsEnd) {
  Transformer t = tiny(GetParam());
  KvCache c = t.make_cache(KvPages{24, 16});  // either pool too small for two prompts
  c.enable_prefix_cache("test");
  std::vector<float> logits;
  auto fill = [&](const std::vector<int32_t>& p) {
    const SeqId s = c.add_sequence();
    for (size_t at = 0; at < p.size(); at += 40) {
      EXPECT_TRUE(c.can_reserve(s, 40)) << "at " << at;
      t.forward(c, s, std::span(p).subspan(at, 40), LogitsFor::last, logits);
    }
    return s;
  };
  const std::vector<int32_t> a = prompt(20, 200), b = prompt(21, 200);
  const SeqId x = fill(a);
  c.register_prefix(x, a);
  c.remove_sequence(x);
  const SeqId y = fill(b);  // takes the free pages and some of a's
  EXPECT_GT(c.segment_usage().cached_fp_pages, 0);
  c.remove_sequence(y);
  const SeqId z = c.add_sequence();
  const int64_t kept = c.attach_prefix(z, a);
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 192);  // 192 when nothing was evicted (EvictsLeastRecentlyUsedWhenPagesRunOut)
}

INSTANTIATE_TEST_SUITE_P(Kv, PrefixCache, ::testing::Values("int2", "bf16"));

TEST(PrefixCacheLimits, RegisteredLateAttachesWhatTheWindowsAllow) {
  Transformer t = tiny("int2");
  KvCache c = t.make_cache(4096);
  c.enable_prefix_cache("test");
  const std::vector<int32_t> a = prompt(3, 150);
  std::vector<float> logits;
  const SeqId x = c.add_sequence();
  t.forward(c, x, a, LogitsFor::last, logits);
  std::vector<int32_t> all = a;
  for (int i = 0; i < 100; ++i) {  // the recent window moves on: its old fp pages are released
    const int32_t id = argmax(logits);
    all.push_back(id);
    t.forward(c, x, std::span<const int32_t>(&id, 1), LogitsFor::last, logits);
  }
  c.register_prefix(x, all);
  const SeqId y = c.add_sequence();
  // At 144 tokens the new sequence would need fp rows for [112, 144): only history is
  // left of them; the sink alone (16 tokens) still fits its windows.
  EXPECT_EQ(c.attach_prefix(y, a), 16);
  const SeqId w = c.add_sequence();  // the whole 250 tokens: fp pages for the last window exist
  EXPECT_EQ(c.attach_prefix(w, all), 240);
}

TEST(PrefixCacheLimits, RefusedWhereItCannotWork) {
  Transformer k = tiny("kivi2");
  KvCache ck = k.make_cache(256);
  EXPECT_THROW(ck.enable_prefix_cache("x"), Error);
  Transformer t(test::tiny_model(false, 3, 2, 32));
  KvSpec s = KvSpec::parse("int2");
  s.sink = 20;  // not a whole page
  t.configure_kv(s);
  KvCache c = t.make_cache(256);
  EXPECT_THROW(c.enable_prefix_cache("x"), Error);
  const SeqId q = c.add_sequence();
  EXPECT_EQ(c.attach_prefix(q, prompt(1, 100)), 0);  // off: always a miss
}

}  // namespace
}  // namespace oscar
