// Transformer::forward_batch against one sequence at a time on a tiny random model:
//  * a decode step over several sequences gives each exactly (bit for bit) the logits a
//    pass of that sequence alone gives, for bf16 and mixed INT2 caches and a QKV-bias model
//    (the key-bias split path);
//  * a step mixing decode rows with prefill chunks keeps the decode rows exact and the
//    prefill rows within f32 summation error (1e-5 relative L2: the sgemm of a larger m
//    may block the sums differently);
//  * a batch that does not fit throws with nothing changed.
#include <gtest/gtest.h>

#include <cmath>

#include "../test_util.h"
#include "../tiny_model.h"
#include "oscar/core/error.h"
#include "oscar/model/transformer.h"

namespace oscar {
namespace {

// Short windows: most of a 60-token sequence is history.
KvSpec spec_of(const std::string& kv) { return test::tiny_kv_spec(kv, 4, 8, 16); }

std::vector<int32_t> tokens(uint64_t seed, size_t n) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t((seed * 7919 + i * 31 + i * i) % 50);
  return t;
}

double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

class BatchedForward : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(BatchedForward, DecodeStepIsExactPerSequence) {
  const auto [kv, bias] = GetParam();
  Transformer t(test::tiny_model(bias, 77));
  t.configure_kv(spec_of(kv));
  const std::vector<size_t> lengths = {1, 9, 13, 54};
  KvCache batched = t.make_cache(1024), alone = t.make_cache(1024);
  std::vector<SeqId> sb, sa;
  std::vector<float> logits;
  for (size_t i = 0; i < lengths.size(); ++i) {
    sb.push_back(batched.add_sequence());
    sa.push_back(alone.add_sequence());
    const auto p = tokens(i, lengths[i]);
    t.forward(batched, sb[i], p, LogitsFor::last, logits);
    t.forward(alone, sa[i], p, LogitsFor::last, logits);
  }
  const int V = t.config().n_vocab;
  for (int step = 0; step < 12; ++step) {  // crosses window and page boundaries
    std::vector<int32_t> next(lengths.size());
    std::vector<SeqTokens> batch;
    for (size_t i = 0; i < lengths.size(); ++i) {
      next[i] = int32_t((step * 13 + i * 5) % 50);
      batch.push_back(SeqTokens{sb[i], std::span<const int32_t>(&next[i], 1)});
    }
    std::vector<float> blog;
    t.forward_batch(batched, batch, blog);
    ASSERT_EQ(blog.size(), lengths.size() * size_t(V));
    for (size_t i = 0; i < lengths.size(); ++i) {
      t.forward(alone, sa[i], std::span<const int32_t>(&next[i], 1), LogitsFor::last, logits);
      for (int j = 0; j < V; ++j)
        ASSERT_EQ(blog[i * size_t(V) + size_t(j)], logits[size_t(j)]) << kv << " step " << step << " seq " << i << " logit " << j;
      EXPECT_EQ(batched.length(sb[i]), alone.length(sa[i]));
    }
  }
}

TEST_P(BatchedForward, MixedDecodeAndPrefillChunks) {
  const auto [kv, bias] = GetParam();
  Transformer t(test::tiny_model(bias, 78));
  t.configure_kv(spec_of(kv));
  KvCache batched = t.make_cache(1024), alone = t.make_cache(1024);
  std::vector<float> logits, blog;
  // Two decoding sequences, two prefilling in chunks (the second one new).
  const auto p0 = tokens(1, 30), p1 = tokens(2, 17), p2 = tokens(3, 40), p3 = tokens(4, 23);
  SeqId b[4], a[4];
  for (int i = 0; i < 4; ++i) {
    b[i] = batched.add_sequence();
    a[i] = alone.add_sequence();
  }
  for (auto [s, p] : {std::pair{0, &p0}, std::pair{1, &p1}}) {
    t.forward(batched, b[s], *p, LogitsFor::last, logits);
    t.forward(alone, a[s], *p, LogitsFor::last, logits);
  }
  t.forward(batched, b[2], std::span(p2).first(11), LogitsFor::last, logits);
  t.forward(alone, a[2], std::span(p2).first(11), LogitsFor::last, logits);
  const int32_t d0 = 7, d1 = 11;
  // Prefill spans first in the argument order: the batch reorders internally and must
  // return logits in the order given.
  const std::vector<SeqTokens> batch = {SeqTokens{b[2], std::span(p2).subspan(11, 20)}, SeqTokens{b[0], {&d0, 1}},
                                        SeqTokens{b[3], std::span(p3)}, SeqTokens{b[1], {&d1, 1}}};
  t.forward_batch(batched, batch, blog);
  const int V = t.config().n_vocab;
  auto check = [&](int slot, SeqId seq, std::span<const int32_t> toks, bool exact) {
    t.forward(alone, seq, toks, LogitsFor::last, logits);
    const float* got = blog.data() + size_t(slot) * size_t(V);
    if (exact) {
      for (int j = 0; j < V; ++j) ASSERT_EQ(got[j], logits[size_t(j)]) << kv << " slot " << slot;
    } else {
      EXPECT_LT(rel_l2(got, logits.data(), size_t(V)), 1e-5) << kv << " slot " << slot;
    }
  };
  check(0, a[2], std::span(p2).subspan(11, 20), false);
  check(1, a[0], {&d0, 1}, true);
  check(2, a[3], std::span(p3), false);
  check(3, a[1], {&d1, 1}, true);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(batched.length(b[i]), alone.length(a[i]));
}

INSTANTIATE_TEST_SUITE_P(Kv, BatchedForward,
                         ::testing::Values(std::tuple{std::string("bf16"), false}, std::tuple{std::string("int2"), false},
                                           std::tuple{std::string("int2-hadamard"), false},
                                           std::tuple{std::string("int4"), true}, std::tuple{std::string("int2"), true}));

TEST(BatchedForward, BatchThatDoesNotFitChangesNothing) {
  Transformer t(test::tiny_model(false, 79));
  t.configure_kv(spec_of("bf16"));
  KvCache cache = t.make_cache(KvPages{4, 0});  // 64 tokens
  const SeqId s0 = cache.add_sequence(), s1 = cache.add_sequence();
  std::vector<float> logits;
  const auto p = tokens(5, 40);
  t.forward(cache, s0, p, LogitsFor::last, logits);
  const KvPages before = cache.free_pages();
  const std::vector<SeqTokens> batch = {SeqTokens{s0, std::span(p).first(1)}, SeqTokens{s1, std::span(p)}};
  EXPECT_THROW(t.forward_batch(cache, batch, logits), Error);
  EXPECT_EQ(cache.free_pages().fp, before.fp);
  EXPECT_EQ(cache.length(s0), 40);
  EXPECT_EQ(cache.length(s1), 0);
  const int32_t bad = 50;  // out of the 50-token vocabulary
  EXPECT_THROW(t.forward_batch(cache, std::vector<SeqTokens>{SeqTokens{s1, {&bad, 1}}}, logits), Error);
  EXPECT_EQ(cache.length(s1), 0);
}

}  // namespace
}  // namespace oscar
