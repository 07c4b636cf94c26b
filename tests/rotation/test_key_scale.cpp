// key_scale_from_moments and scaled_query_covariance: planted moments give
// s ∝ (K/Q)^{1/4} with geometric mean 1 per KV head and the Cauchy–Schwarz gain; the scaled
// covariance equals the qqt objective of an accumulator fed the scaled queries.
#include <gtest/gtest.h>

#include <cmath>

#include "../test_util.h"
#include "oscar/rotation/key_scale.h"
#include "oscar/core/error.h"

namespace oscar {
namespace {

TEST(KeyScale, FromPlantedMoments) {
  const int nkv = 2, d = 8;
  std::vector<double> k(nkv * d), q(nkv * d);
  for (int i = 0; i < nkv * d; ++i) k[size_t(i)] = 0.5 + i, q[size_t(i)] = 3.0 / (1.0 + i % 5);
  const KeyScaleFit f = key_scale_from_moments(k, q, nkv, d);
  ASSERT_EQ(f.scale.size(), size_t(nkv * d));
  for (int h = 0; h < nkv; ++h) {
    double log_sum = 0.0;
    for (int c = 0; c < d; ++c) {
      const size_t i = size_t(h * d + c);
      log_sum += std::log(f.scale[i]);
      // Ratios between channels follow (K/Q)^{1/4}.
      const double want = std::pow(k[i] / q[i], 0.25) / std::pow(k[size_t(h * d)] / q[size_t(h * d)], 0.25);
      EXPECT_NEAR(f.scale[i] / f.scale[size_t(h * d)], want, 1e-5 * want);
    }
    EXPECT_NEAR(log_sum, 0.0, 1e-5);
  }
  EXPECT_LT(f.predicted_gain, 1.0);
  // K ∝ Q: nothing to gain, all ones.
  const KeyScaleFit flat = key_scale_from_moments(q, q, nkv, d);
  EXPECT_NEAR(flat.predicted_gain, 1.0, 1e-12);
  for (float s : flat.scale) EXPECT_NEAR(s, 1.0f, 1e-6f);
  // A dead key channel is floored, not infinite.
  std::vector<double> dead = k;
  dead[3] = 0.0;
  for (float s : key_scale_from_moments(dead, q, nkv, d).scale) EXPECT_TRUE(std::isfinite(s) && s > 0.0f) << s;
  EXPECT_THROW(key_scale_from_moments(std::vector<double>(5), q, nkv, d), Error);
}

TEST(KeyScale, ScaledCovarianceEqualsTheScaledQueriesObjective) {
  const int nh = 4, nkv = 2, d = 16;
  const int64_t n = 50;
  const std::vector<float> q = test::random_vector(size_t(n * nh * d), 5, -2.0f, 2.0f);
  const std::vector<float> s = test::random_vector(size_t(nkv * d), 6, 0.3f, 3.0f);
  CovarianceAccumulator plain(nh, nkv, d), scaled(nh, nkv, d);
  plain.add_pass1(q.data(), nullptr, nullptr, n);
  std::vector<float> qs = q;
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < nh; ++h)
      for (int c = 0; c < d; ++c) qs[size_t((t * nh + h) * d + c)] *= s[size_t((h / (nh / nkv)) * d + c)];
  scaled.add_pass1(qs.data(), nullptr, nullptr, n);
  const Eigen::MatrixXd got = scaled_query_covariance(plain, s), want = scaled.objective("qqt");
  EXPECT_LE((got - want).cwiseAbs().maxCoeff(), 1e-6 * want.cwiseAbs().maxCoeff());  // qs rounded to f32
  const std::vector<double> m = query_channel_moments(plain);
  for (int h = 0; h < nkv; ++h)
    for (int c = 0; c < d; ++c) EXPECT_DOUBLE_EQ(m[size_t(h * d + c)], plain.query_covariance(h)(c, c));
  EXPECT_THROW(scaled_query_covariance(plain, std::vector<float>(3, 1.0f)), Error);
}

}  // namespace
}  // namespace oscar
