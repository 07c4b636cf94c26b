// KeyBias (the split-off K bias evaluated from positions) against what it replaced: rows built
// by append_rope_rows and mapped into the cache's basis, and q·a_t summed in double.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../test_util.h"
#include "oscar/attention/key_bias.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {
namespace {

RopeFreqs make_rope(int d, RopeStyle style, double position_scale) {
  RopeFreqs f;
  f.style = style;
  f.position_scale = position_scale;
  for (int i = 0; i < d / 2; ++i) f.inv_freq.push_back(std::pow(1.0e6, -2.0 * i / d));
  return f;
}

// A dense d × d mix per head: rows ← rows · B (stands in for ⊘ s and R_K).
struct HeadMix {
  int heads, d;
  std::vector<float> b;
  void operator()(float* rows, int64_t n) const {
    std::vector<float> tmp(static_cast<size_t>(d));
    for (int64_t r = 0; r < n * heads; ++r) {
      float* x = rows + r * d;
      for (int j = 0; j < d; ++j) {
        double acc = 0.0;
        for (int i = 0; i < d; ++i) acc += double(x[i]) * b[size_t(i * d + j)];
        tmp[size_t(j)] = float(acc);
      }
      std::copy(tmp.begin(), tmp.end(), x);
    }
  }
};

struct Fixture {
  RopeFreqs rope;
  HeadMix mix;
  std::vector<float> bias;
  KeyBias kb;
  Fixture(int heads, int d, RopeStyle style, double ps, uint64_t seed)
      : rope(make_rope(d, style, ps)),
        mix{heads, d, test::random_vector(size_t(d * d), seed, -0.3f, 0.3f)},
        bias(test::random_vector(size_t(heads * d), seed + 1, -4, 4)),
        kb(rope, heads, d, bias.data(), mix) {}
  // The old table: RoPE(b, t) rows, then the basis change.
  std::vector<float> expected_rows(int64_t p0, int64_t n) const {
    std::vector<float> rows;
    append_rope_rows(rope, bias.data(), mix.heads, mix.d, p0, p0 + n, rows);
    mix(rows.data(), n);
    return rows;
  }
};

// a_t within 2e-6 of max|a| of the old rows (f32 cos/sin products against RoPE's own), for
// both pair layouts, a position scale, positions across anchors and beyond 100K.
TEST(KeyBias, RowsEqualRopeOfTheBiasInTheCacheBasis) {
  for (RopeStyle style : {RopeStyle::neox, RopeStyle::interleaved})
    for (int d : {64, 128, 256})
      for (const auto& [p0, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {0, 130}, {63, 2}, {100003, 97}}) {
        Fixture f(2, d, style, style == RopeStyle::neox ? 1.0 : 0.25, uint64_t(d + p0));
        std::vector<float> got(size_t(n * 2 * d), NAN);
        f.kb.rows(p0, n, got.data());
        const std::vector<float> want = f.expected_rows(p0, n);
        double scale = 0.0, worst = 0.0;
        for (float x : want) scale = std::max(scale, double(std::fabs(x)));
        for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
        EXPECT_LE(worst, 2e-6 * scale) << "d " << d << " p0 " << p0 << " n " << n << " worst " << worst;
      }
}

// A row's bits depend on its position only, not on the range it was asked in: the cache
// subtracts a_t at write and prefill adds it back, whatever the chunking.
TEST(KeyBias, RowsDoNotDependOnTheRange) {
  Fixture f(2, 64, RopeStyle::neox, 1.0, 7);
  std::vector<float> all(size_t(200 * 128)), one(128);
  f.kb.rows(0, 200, all.data());
  for (int64_t t : {0, 63, 64, 65, 199}) {
    f.kb.rows(t, 1, one.data());
    for (int e = 0; e < 128; ++e) ASSERT_EQ(one[size_t(e)], all[size_t(t * 128 + e)]) << "t " << t;
  }
}

// q·a_t from coefficients (AVX2 and plain) against the double dot of q with the expected
// row: |err| ≤ 2e-5·‖q‖·‖a_t‖. Ranges start inside a block, span several, and end in one.
TEST(KeyBias, ScoresEqualQueryDotRows) {
  const bool avx2 = cpu_has_avx2();
  for (int d : {64, 128, 256})
    for (int G : {1, 3, 6, 7, 16})
      for (const auto& [p0, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {5, 7}, {60, 9}, {64, 256}, {100001, 300}}) {
        const int heads = 2;
        Fixture f(heads, d, RopeStyle::neox, 1.0, uint64_t(3 * d + G));
        const auto q = test::random_vector(size_t(heads * G * d), uint64_t(p0 + n + G), -2, 2);
        std::vector<float> coef(q.size());
        f.kb.coefficients(q.data(), heads * G, coef.data());
        const std::vector<float> rows = f.expected_rows(p0, n);
        for (int kvh = 0; kvh < heads; ++kvh) {
          const float* cg = coef.data() + kvh * G * d;
          std::vector<float> plain(size_t(G * n), NAN), fast(size_t(G * n), NAN);
          f.kb.scores_scalar(cg, G, p0, n, plain.data());
          if (avx2) f.kb.scores_avx2(cg, G, p0, n, fast.data());
          for (int g = 0; g < G; ++g) {
            const float* qg = q.data() + (kvh * G + g) * d;
            double qq = 0.0;
            for (int e = 0; e < d; ++e) qq += double(qg[e]) * qg[e];
            for (int64_t t = 0; t < n; ++t) {
              const float* a = rows.data() + (t * heads + kvh) * d;
              double want = 0.0, aa = 0.0;
              for (int e = 0; e < d; ++e) {
                want += double(qg[e]) * a[e];
                aa += double(a[e]) * a[e];
              }
              const double tol = 2e-5 * std::sqrt(qq * aa);
              ASSERT_NEAR(plain[size_t(g * n + t)], want, tol) << "d " << d << " G " << G << " p0 " << p0 << " t " << t;
              if (avx2) {
                ASSERT_NEAR(fast[size_t(g * n + t)], want, tol) << "d " << d << " G " << G << " p0 " << p0 << " t " << t;
              }
            }
          }
        }
      }
}

}  // namespace
}  // namespace oscar
