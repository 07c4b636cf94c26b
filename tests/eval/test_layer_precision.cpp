// Per-layer precision under a budget: checked against an exhaustive search on small random
// problems (greedy exchange is not always optimal, so the test states how close it must
// come), plus the budget edge cases and the --kv-layers string.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "oscar/eval/layer_precision.h"
#include "oscar/core/error.h"
#include "oscar/kv/kv_spec.h"

namespace oscar {
namespace {

using Candidates = std::vector<std::vector<LayerTypeCandidate>>;

Candidates ladder(const std::vector<double>& int2_errors) {
  Candidates c;
  for (double e : int2_errors) c.push_back({{"int2-oscar", 2.25, e}, {"int4", 4.25, e / 4}, {"int8", 8.25, e / 64}});
  return c;
}

double mean_bits(const Candidates& c, const std::vector<int>& pick) {
  double s = 0;
  for (size_t l = 0; l < c.size(); ++l) s += c[l][size_t(pick[l])].bits;
  return s / double(c.size());
}

double sq_error(const Candidates& c, const std::vector<int>& pick) {
  double s = 0;
  for (size_t l = 0; l < c.size(); ++l) s += c[l][size_t(pick[l])].error * c[l][size_t(pick[l])].error;
  return s;
}

TEST(LayerPrecision, CheapestWhenBudgetIsTight) {
  const Candidates c = ladder({0.3, 0.1, 0.2});
  EXPECT_EQ(choose_layer_types(c, 2.25), (std::vector<int>{0, 0, 0}));
}

TEST(LayerPrecision, UpgradesTheWorstLayerFirst) {
  // Budget for one int4 layer among four: it must go to the layer with the largest error.
  const Candidates c = ladder({0.1, 0.5, 0.2, 0.15});
  const std::vector<int> pick = choose_layer_types(c, 2.25 + 2.0 / 4);
  EXPECT_EQ(pick, (std::vector<int>{0, 1, 0, 0}));
}

TEST(LayerPrecision, GenerousBudgetTakesTheBestType) {
  const Candidates c = ladder({0.1, 0.5});
  EXPECT_EQ(choose_layer_types(c, 100.0), (std::vector<int>{2, 2}));
}

TEST(LayerPrecision, BudgetBelowCheapestIsAnError) {
  EXPECT_THROW(choose_layer_types(ladder({0.1, 0.2}), 2.0), Error);
  EXPECT_THROW(choose_layer_types(Candidates{{}}, 4.0), Error);
  EXPECT_THROW(choose_layer_types(Candidates{}, 4.0), Error);
}

TEST(LayerPrecision, NeverExceedsBudgetAndComesCloseToExhaustive) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> err(0.01, 1.0), budget(2.25, 6.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + int(rng() % 6);
    std::vector<double> e;
    for (int l = 0; l < n; ++l) e.push_back(err(rng));
    const Candidates c = ladder(e);
    const double b = budget(rng);
    const std::vector<int> pick = choose_layer_types(c, b);
    ASSERT_LE(mean_bits(c, pick), b + 1e-9);
    // Exhaustive optimum over 3^n choices.
    double best = 1e300;
    std::vector<int> p(size_t(n), 0);
    for (int code = 0, total = int(std::pow(3, n)); code < total; ++code) {
      for (int l = 0, x = code; l < n; ++l, x /= 3) p[size_t(l)] = x % 3;
      if (mean_bits(c, p) <= b + 1e-9) best = std::min(best, sq_error(c, p));
    }
    // Greedy by error drop per bit on a knapsack: within 2x of the optimum's squared error,
    // or within the error left by a single layer's step (the usual greedy bound).
    double max_step = 0;
    for (const auto& layer : c) max_step = std::max(max_step, layer[0].error * layer[0].error);
    EXPECT_LE(sq_error(c, pick), std::max(2.0 * best, best + max_step)) << "trial " << trial;
  }
}

TEST(LayerPrecision, KvLayersStringRoundTripsThroughTheParser) {
  const std::vector<std::string> types = {"int8", "int4", "int4", "int2-oscar", "int2-oscar", "int4", "int2-oscar"};
  const std::string s = kv_layers_string(types, "int2-oscar");
  EXPECT_EQ(s, "0:int8,1-2:int4,5:int4");
  const std::vector<KvLayerType> parsed = parse_kv_layers(s, int(types.size()));
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[1].first, 1);
  EXPECT_EQ(parsed[1].last, 2);
  EXPECT_EQ(parsed[1].type, "int4");
  EXPECT_EQ(kv_layers_string({"int2-oscar", "int2-oscar"}, "int2-oscar"), "");
}

}  // namespace
}  // namespace oscar
