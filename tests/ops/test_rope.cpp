#include <gtest/gtest.h>

#include <cmath>

#include "../test_util.h"
#include "oscar/core/error.h"
#include "oscar/ops/rope.h"

namespace oscar {
namespace {

ModelConfig rope_config(RopeStyle style, int hd) {
  ModelConfig c;
  c.head_dim = hd;
  c.rope_theta = 10000.0f;
  c.rope_style = style;
  return c;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

TEST(Rope, PositionZeroIsIdentityAndNormIsKept) {
  for (RopeStyle st : {RopeStyle::neox, RopeStyle::interleaved}) {
    const RopeFreqs f = rope_freqs(rope_config(st, 64));
    auto x = test::random_vector(2 * 64, 5);
    auto y = x;
    rope_apply(f, y.data(), 2, 64, 0);
    EXPECT_TRUE(test::all_close(y, x, 0, 0));
    rope_apply(f, y.data(), 2, 64, 12345);
    EXPECT_NEAR(dot(y, y), dot(x, x), 1e-4);
  }
}

// The point of RoPE: q·k depends only on the distance between positions.
TEST(Rope, ScoreDependsOnlyOnRelativePosition) {
  for (RopeStyle st : {RopeStyle::neox, RopeStyle::interleaved}) {
    const RopeFreqs f = rope_freqs(rope_config(st, 128));
    auto q = test::random_vector(128, 11), k = test::random_vector(128, 12);
    auto score = [&](int64_t pq, int64_t pk) {
      auto a = q, b = k;
      rope_apply(f, a.data(), 1, 128, pq);
      rope_apply(f, b.data(), 1, 128, pk);
      return dot(a, b);
    };
    EXPECT_NEAR(score(10, 3), score(1007, 1000), 1e-4);
    EXPECT_NEAR(score(50000, 49990), score(20, 10), 1e-3);
  }
}

TEST(Rope, PairLayouts) {
  // One head of dim 4 at position 1: neox rotates (0,2) and (1,3); interleaved (0,1) and (2,3).
  std::vector<float> x = {1, 0, 0, 0};
  auto y = x;
  rope_apply(rope_freqs(rope_config(RopeStyle::neox, 4)), y.data(), 1, 4, 1);
  EXPECT_NEAR(y[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(y[2], std::sin(1.0), 1e-6);
  y = x;
  rope_apply(rope_freqs(rope_config(RopeStyle::interleaved, 4)), y.data(), 1, 4, 1);
  EXPECT_NEAR(y[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(y[1], std::sin(1.0), 1e-6);
}

TEST(Rope, UnsupportedScalingIsAnError) {
  ModelConfig c = rope_config(RopeStyle::neox, 64);
  c.rope_scaling.type = "yarn";
  EXPECT_THROW(rope_freqs(c), Error);
}

}  // namespace
}  // namespace oscar
