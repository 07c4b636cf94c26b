// Sampler: greedy paths equal argmax, truncation keeps exactly the expected support,
// the untruncated draw matches softmax (chi-square), seeds reproduce, params validate.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "oscar/core/error.h"
#include "oscar/sampling/sampler.h"

using namespace oscar;

namespace {

SamplerParams plain(float temperature = 1.0f) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = 1234;
  return p;
}

// Logits whose softmax is exactly proportional to `probs`.
std::vector<float> logits_for(std::initializer_list<double> probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(float(std::log(p)));
  return l;
}

std::set<int32_t> support(SamplerParams p, const std::vector<float>& logits, int draws = 4000) {
  Sampler s(p);
  std::set<int32_t> seen;
  for (int i = 0; i < draws; ++i) seen.insert(s.sample(logits, {}));
  return seen;
}

std::vector<float> random_logits(size_t n, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> l(n);
  for (auto& x : l) x = d(rng);
  return l;
}

// Pearson chi-square of `counts` against `probs` (all expected counts are large here).
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi2 = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

void expect_bad_param(SamplerParams p, const char* name) {
  try {
    Sampler s(p);
    ADD_FAILURE() << "accepted bad " << name;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Argmax, LowestIndexOnTies) {
  EXPECT_EQ(argmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(argmax(std::vector<float>{5}), 0);
  EXPECT_EQ(argmax(std::vector<float>{-INFINITY, -1, -1}), 1);
  EXPECT_THROW(argmax(std::vector<float>{}), Error);
}

TEST(Sampler, GreedyIsArgmax) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const auto l = random_logits(1000, seed);
    SamplerParams p;  // default truncation settings must not matter for greedy
    p.temperature = 0.0f;
    Sampler s(p);
    EXPECT_EQ(s.sample(l, {}), argmax(l));
  }
}

TEST(Sampler, TopKOneIsArgmaxEvenWithTies) {
  SamplerParams p = plain(1.5f);
  p.top_k = 1;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto l = random_logits(500, seed);
    Sampler s(p);
    EXPECT_EQ(s.sample(l, {}), argmax(l));
  }
  EXPECT_EQ(support(p, {0.5f, 2.0f, 2.0f, 1.0f}, 200), std::set<int32_t>{1});
}

TEST(Sampler, TopKKeepsTheKBest) {
  SamplerParams p = plain();
  p.top_k = 3;
  // Token order scrambled so that index order is not logit order.
  const std::vector<float> l = {0.1f, 1.0f, -2.0f, 0.9f, 0.95f, 0.2f};
  EXPECT_EQ(support(p, l), (std::set<int32_t>{1, 3, 4}));
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  // Probabilities 0.05, 0.5, 0.15, 0.3 (index order scrambled).
  const auto l = logits_for({0.05, 0.5, 0.15, 0.3});
  SamplerParams p = plain();
  p.top_p = 0.45f;
  EXPECT_EQ(support(p, l), (std::set<int32_t>{1}));
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8
  EXPECT_EQ(support(p, l), (std::set<int32_t>{1, 3}));
  p.top_p = 0.85f;  // 0.8 < 0.85 <= 0.95
  EXPECT_EQ(support(p, l), (std::set<int32_t>{1, 3, 2}));
  p.top_p = 1.0f;
  EXPECT_EQ(support(p, l), (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(Sampler, MinPKeepsTokensWithinRatioOfTheBest) {
  const auto l = logits_for({0.05, 0.5, 0.15, 0.3});
  SamplerParams p = plain();
  p.min_p = 0.5f;  // threshold 0.25
  EXPECT_EQ(support(p, l), (std::set<int32_t>{1, 3}));
  p.min_p = 0.25f;  // threshold 0.125
  EXPECT_EQ(support(p, l), (std::set<int32_t>{1, 3, 2}));
  p.min_p = 0.05f;  // threshold 0.025: everything
  EXPECT_EQ(support(p, l), (std::set<int32_t>{0, 1, 2, 3}));
  p.min_p = 1.0f;  // only the best
  EXPECT_EQ(support(p, l), (std::set<int32_t>{1}));
}

TEST(Sampler, TruncationOrderFollowsLlamaCpp) {
  const auto l = logits_for({0.05, 0.5, 0.15, 0.3});
  SamplerParams p = plain();
  // top-p renormalizes over the top-k survivors: 0.5/0.95, 0.8/0.95 = 0.842 >= 0.82.
  p.top_k = 3;
  p.top_p = 0.82f;
  EXPECT_EQ(support(p, l), (std::set<int32_t>{1, 3}));
  // Without top-k, top-p sees all four (cum 0.5, 0.8, 0.95 -> three kept), and min-p after it
  // keeps those three: min-p must not renormalize what top-p sees.
  p.top_k = 0;
  p.min_p = 0.25f;
  EXPECT_EQ(support(p, l), (std::set<int32_t>{1, 3, 2}));
  // Both on: the stricter wins.
  p.top_p = 0.85f;
  p.min_p = 0.5f;
  EXPECT_EQ(support(p, l), (std::set<int32_t>{1, 3}));
}

// llama.cpp's chain written out plainly: sort, top-k, softmax over the survivors, top-p
// prefix, min-p against the best. Returns the kept ids.
std::set<int32_t> reference_truncation(const std::vector<float>& l, int top_k, double top_p, double min_p) {
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  if (top_k > 0 && size_t(top_k) < order.size()) order.resize(size_t(top_k));
  const double m = l[order[0]];
  double z = 0;
  for (int32_t id : order) z += std::exp(l[id] - m);
  double cum = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    cum += std::exp(l[order[i]] - m) / z;
    if (cum >= top_p) {
      order.resize(i + 1);
      break;
    }
  }
  std::set<int32_t> kept;
  for (int32_t id : order)
    if (std::exp(l[id] - m) >= min_p) kept.insert(id);
  return kept;
}

TEST(Sampler, RandomTruncationsMatchAPlainReference) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t n = 2 + rng() % 40;
    std::vector<float> l(n);
    // Half-unit steps make many ties; -inf masks a few tokens.
    for (auto& x : l) x = rng() % 10 == 0 ? -INFINITY : float(int(rng() % 16)) * 0.5f - 4.0f;
    l[rng() % n] = 5.0f;
    SamplerParams p = plain(1000.0f);  // flat after truncation: every kept token shows up
    p.top_k = int(rng() % 4 == 0 ? 0 : rng() % (n + 2));
    p.top_p = rng() % 4 == 0 ? 1.0f : 0.05f + 0.9f * float(rng() % 1000) / 1000.0f;
    p.min_p = rng() % 4 == 0 ? 0.0f : float(rng() % 1000) / 1000.0f * 0.5f;
    p.seed = trial;
    auto want = reference_truncation(l, p.top_k, p.top_p, p.min_p);
    std::erase_if(want, [&](int32_t id) { return std::isinf(l[size_t(id)]); });  // zero mass
    EXPECT_EQ(support(p, l, 3000), want) << "trial " << trial << " top_k " << p.top_k << " top_p " << p.top_p
                                          << " min_p " << p.min_p;
  }
}

TEST(Sampler, TopPOnALargeVocabularyMatchesBruteForce) {
  // 150k tokens, top-k off: the partial sort must find the same set as a full sort.
  const auto l = random_logits(150000, 99, 2.0f);
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  const double m = l[order[0]];
  double z = 0;
  for (float x : l) z += std::exp(x - m);
  std::set<int32_t> allowed;
  double cum = 0;
  for (int32_t id : order) {
    allowed.insert(id);
    cum += std::exp(l[id] - m) / z;
    if (cum >= 0.9) break;
  }
  ASSERT_GT(allowed.size(), 256u);  // exercises the growing-prefix path
  SamplerParams p = plain();
  p.top_p = 0.9f;
  Sampler s(p);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(allowed.count(s.sample(l, {}))) << i;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 50;
  std::printf("top-p over 150k logits: %.2f ms per sample (%zu kept)\n", ms, allowed.size());

  // A large top-k takes the nth_element path instead of the heap.
  const std::set<int32_t> top5000(order.begin(), order.begin() + 5000);
  SamplerParams k = plain();
  k.top_k = 5000;
  Sampler sk(k);
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(top5000.count(sk.sample(l, {}))) << i;
}

TEST(Sampler, DefaultParamsOnA150kVocabulary) {
  const auto l = random_logits(150000, 5);
  Sampler s(SamplerParams{});
  std::vector<int32_t> history;
  for (int i = 0; i < 100; ++i) {
    const int32_t t = s.sample(l, history);
    ASSERT_GE(t, 0);
    ASSERT_LT(t, 150000);
    history.push_back(t);
  }
}

TEST(Sampler, DistributionMatchesSoftmax) {
  // df = 4; chi-square above 18.47 happens with probability 0.001 for a correct sampler.
  const std::vector<float> l = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f};
  for (float temperature : {1.0f, 0.5f, 2.0f}) {
    std::vector<double> probs;
    double z = 0;
    for (float x : l) z += std::exp(x / temperature);
    for (float x : l) probs.push_back(std::exp(x / temperature) / z);
    Sampler s(plain(temperature));
    const int n = 20000;
    std::vector<int> counts(l.size());
    for (int i = 0; i < n; ++i) ++counts[size_t(s.sample(l, {}))];
    const double chi2 = chi_square(counts, probs, n);
    EXPECT_LT(chi2, 18.47) << "temperature " << temperature;
  }
}

TEST(Sampler, SameSeedSameSequence) {
  const auto l = random_logits(1000, 3, 1.0f);
  SamplerParams p;
  p.seed = 42;
  Sampler a(p), b(p);
  std::vector<int32_t> seq_a, seq_b;
  for (int i = 0; i < 200; ++i) {
    seq_a.push_back(a.sample(l, seq_a));
    seq_b.push_back(b.sample(l, seq_b));
  }
  EXPECT_EQ(seq_a, seq_b);
  a.reset(42);
  std::vector<int32_t> again;
  for (int i = 0; i < 200; ++i) again.push_back(a.sample(l, again));
  EXPECT_EQ(again, seq_a);
  a.reset(43);
  std::vector<int32_t> other;
  for (int i = 0; i < 200; ++i) other.push_back(a.sample(l, other));
  EXPECT_NE(other, seq_a);
}

TEST(Sampler, RepetitionPenalty) {
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 1.5f;
  // Positive logit divided: 2.0 -> 1.33 < 1.9.
  EXPECT_EQ(Sampler(p).sample(std::vector<float>{2.0f, 1.9f, -1.0f}, std::vector<int32_t>{0}), 1);
  // Negative logit multiplied: -1.0 -> -1.5 < -1.2.
  EXPECT_EQ(Sampler(p).sample(std::vector<float>{-1.0f, -1.2f}, std::vector<int32_t>{0}), 1);
  // Once per distinct token, however often it repeats: 2.0 -> 1.33 > 1.0.
  EXPECT_EQ(Sampler(p).sample(std::vector<float>{2.0f, 1.0f}, std::vector<int32_t>{0, 0, 0}), 0);
  // Only the last n tokens count.
  p.repeat_last_n = 2;
  EXPECT_EQ(Sampler(p).sample(std::vector<float>{2.0f, 1.9f}, std::vector<int32_t>{0, 1, 1}), 0);
  EXPECT_EQ(Sampler(p).sample(std::vector<float>{2.0f, 1.9f, -5.0f}, std::vector<int32_t>{1, 2, 0}), 1);
  p.repeat_last_n = 0;
  EXPECT_EQ(Sampler(p).sample(std::vector<float>{2.0f, 1.9f}, std::vector<int32_t>{0}), 0);
  p.repeat_last_n = -1;  // whole history
  std::vector<int32_t> long_history(1000, 1);
  long_history[0] = 0;
  EXPECT_EQ(Sampler(p).sample(std::vector<float>{2.0f, 1.9f, 1.8f}, long_history), 2);
  // Ids outside the vocabulary are an error, not a write out of bounds.
  EXPECT_THROW(Sampler(p).sample(std::vector<float>{1.0f, 2.0f}, std::vector<int32_t>{2}), Error);
  EXPECT_THROW(Sampler(p).sample(std::vector<float>{1.0f, 2.0f}, std::vector<int32_t>{-1}), Error);

  // The penalty also shifts the sampled distribution.
  SamplerParams q = plain(1.0f);
  q.repeat_penalty = 3.0f;
  Sampler s(q);
  const std::vector<float> l = {1.0f, 1.0f};
  int zeros = 0;
  for (int i = 0; i < 2000; ++i) zeros += s.sample(l, std::vector<int32_t>{0}) == 0;
  EXPECT_LT(zeros, 2000 * 0.4);  // p(0) = 1 / (1 + e^(2/3)) = 0.34
}

TEST(Sampler, MaskedAndBrokenLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  // -inf masks a token.
  EXPECT_EQ(support(plain(), {-inf, 0.0f, -inf, 0.0f}, 500), (std::set<int32_t>{1, 3}));
  Sampler s(plain());
  EXPECT_THROW(s.sample(std::vector<float>{}, {}), Error);
  EXPECT_THROW(s.sample(std::vector<float>{0.0f, std::nanf("")}, {}), Error);
  EXPECT_THROW(s.sample(std::vector<float>{0.0f, inf}, {}), Error);
  EXPECT_THROW(s.sample(std::vector<float>{-inf, -inf}, {}), Error);
}

TEST(Sampler, InvalidParamsNameTheParameter) {
  auto with = [](auto set) {
    SamplerParams p;
    set(p);
    return p;
  };
  expect_bad_param(with([](SamplerParams& p) { p.temperature = -0.1f; }), "temperature");
  expect_bad_param(with([](SamplerParams& p) { p.temperature = std::nanf(""); }), "temperature");
  expect_bad_param(with([](SamplerParams& p) { p.top_k = -1; }), "top_k");
  expect_bad_param(with([](SamplerParams& p) { p.top_p = 0.0f; }), "top_p");
  expect_bad_param(with([](SamplerParams& p) { p.top_p = 1.01f; }), "top_p");
  expect_bad_param(with([](SamplerParams& p) { p.min_p = -0.01f; }), "min_p");
  expect_bad_param(with([](SamplerParams& p) { p.min_p = 1.5f; }), "min_p");
  expect_bad_param(with([](SamplerParams& p) { p.repeat_penalty = 0.0f; }), "repeat_penalty");
  expect_bad_param(with([](SamplerParams& p) { p.repeat_penalty = -1.0f; }), "repeat_penalty");
  expect_bad_param(with([](SamplerParams& p) { p.repeat_last_n = -2; }), "repeat_last_n");
  EXPECT_NO_THROW(Sampler(with([](SamplerParams& p) { p.temperature = 0.0f; p.top_k = 0; p.top_p = 1.0f; p.min_p = 0.0f; })));
}
