// key_mean_after_split: keys planted as RoPE(b, p) + m + noise over several prompts give
// back m (the bias part taken out exactly, the noise within 5σ of a mean); without a bias
// the plain mean; sizes are checked.
#include <gtest/gtest.h>

#include <random>

#include "oscar/rotation/key_mean.h"
#include "oscar/core/error.h"

namespace oscar {
namespace {

TEST(KeyMean, TakesOutTheBiasAndKeepsTheRest) {
  constexpr int nkv = 2, d = 16, prompts = 3;
  constexpr int64_t per_prompt = 700, kvd = nkv * d;
  RopeFreqs rope;
  for (int i = 0; i < d / 2; ++i) rope.inv_freq.push_back(std::pow(10000.0, -2.0 * i / d));
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::normal_distribution<double> noise(0.0, 0.2);
  std::vector<float> bias(kvd), m(kvd);
  for (int64_t i = 0; i < kvd; ++i) bias[size_t(i)] = u(rng), m[size_t(i)] = u(rng);
  std::vector<double> sum(kvd, 0.0), plain_sum(kvd, 0.0);
  for (int p = 0; p < prompts; ++p)
    for (int64_t t = 0; t < per_prompt; ++t) {
      std::vector<float> row = bias;
      rope_apply(rope, row.data(), nkv, d, t);
      for (int64_t i = 0; i < kvd; ++i) {
        const double e = noise(rng);
        sum[size_t(i)] += row[size_t(i)] + m[size_t(i)] + e;
        plain_sum[size_t(i)] += m[size_t(i)] + e;
      }
    }
  const std::vector<float> got = key_mean_after_split(sum, per_prompt, prompts, rope, bias, nkv, d);
  const std::vector<float> plain = key_mean_after_split(plain_sum, per_prompt, prompts, rope, {}, nkv, d);
  ASSERT_EQ(got.size(), size_t(kvd));
  for (int64_t i = 0; i < kvd; ++i) {
    EXPECT_NEAR(got[size_t(i)], m[size_t(i)], 0.03) << i;  // 5σ of a 2100-row mean of N(0, 0.2²) is 0.022
    EXPECT_NEAR(plain[size_t(i)], got[size_t(i)], 1e-3) << i;
  }
  EXPECT_THROW(key_mean_after_split(std::vector<double>(5), per_prompt, prompts, rope, {}, nkv, d), Error);
  EXPECT_THROW(key_mean_after_split(sum, per_prompt, prompts, rope, std::vector<float>(3), nkv, d), Error);
  EXPECT_THROW(key_mean_after_split(sum, 0, prompts, rope, {}, nkv, d), Error);
}

}  // namespace
}  // namespace oscar
