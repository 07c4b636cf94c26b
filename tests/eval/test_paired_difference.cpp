// paired_difference: the mean is the plain mean of a − b; the block standard error matches
// σ/√n on independent samples and grows on correlated ones, where the independent-sample
// error would call a zero difference significant.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "oscar/core/error.h"
#include "oscar/eval/paired_difference.h"

namespace oscar {
namespace {

TEST(PairedDifference, MeanAndIndependentSamplesError) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> noise(0.0, 1.0);
  const int n = 8192;
  std::vector<double> a(n), b(n);
  double direct = 0.0;
  for (int i = 0; i < n; ++i) {
    b[size_t(i)] = 3.0 + noise(rng);
    a[size_t(i)] = b[size_t(i)] + 0.05 + 0.5 * noise(rng);
    direct += a[size_t(i)] - b[size_t(i)];
  }
  const PairedDifference d = paired_difference(a, b, 64);
  EXPECT_NEAR(d.mean, direct / n, 1e-12);
  EXPECT_EQ(d.blocks, n / 64);
  const double iid = 0.5 / std::sqrt(double(n));  // σ/√n of the difference
  EXPECT_GT(d.standard_error, 0.7 * iid);
  EXPECT_LT(d.standard_error, 1.3 * iid);
  EXPECT_TRUE(d.significant(2.0));  // 0.05 is about 9 standard errors
  EXPECT_FALSE(d.significant(20.0));
}

TEST(PairedDifference, CorrelatedPositionsWidenTheError) {
  // No true difference, but the difference drifts in runs of 128 positions: a per-position
  // error would be √128 too small; the block error (blocks of 256) sees the runs.
  std::mt19937_64 rng(12);
  std::normal_distribution<double> noise(0.0, 1.0);
  const int n = 16384, run = 128;
  std::vector<double> a(n), b(n, 0.0);
  double level = 0.0;
  for (int i = 0; i < n; ++i) {
    if (i % run == 0) level = noise(rng);
    a[size_t(i)] = level + 0.1 * noise(rng);
  }
  const PairedDifference d = paired_difference(a, b, 256);
  const PairedDifference per_position = paired_difference(a, b, 1);
  EXPECT_GT(d.standard_error, 5.0 * per_position.standard_error);
  EXPECT_LT(std::abs(d.mean), 3.0 * d.standard_error);
  EXPECT_FALSE(d.significant(3.0));
}

TEST(PairedDifference, UnevenBlocksAndBadInput) {
  const std::vector<double> a = {1, 2, 3, 4, 5, 6, 7}, b(7, 0.0);
  const PairedDifference d = paired_difference(a, b, 3);  // 2 blocks: [1,2,3] and [4..7]
  EXPECT_EQ(d.blocks, 2);
  EXPECT_NEAR(d.mean, 4.0, 1e-12);
  // block means 2 and 5.5: sd √(1.75²·2) = 2.4749, over √2
  EXPECT_NEAR(d.standard_error, std::sqrt(2 * 1.75 * 1.75) / std::sqrt(2.0), 1e-12);
  const PairedDifference one = paired_difference(a, b, 100);  // one block: no error estimate
  EXPECT_TRUE(std::isinf(one.standard_error));
  EXPECT_FALSE(one.significant(2.0));
  EXPECT_THROW(paired_difference(a, std::vector<double>(6), 3), Error);
  EXPECT_THROW(paired_difference(a, b, 0), Error);
  EXPECT_THROW(paired_difference(std::vector<double>{}, std::vector<double>{}, 3), Error);
}

}  // namespace
}  // namespace oscar
