#include <gtest/gtest.h>

#include "../test_util.h"
#include "oscar/ops/cpu_features.h"
#include "oscar/ops/matmul.h"

namespace oscar {
namespace {

// Fast paths (AVX2 matvec, OpenBLAS sgemm) against the double-accumulating reference.
// Tolerance: f32 accumulation over k terms of magnitude ≤ 1: atol 1e-5·sqrt(k) covers it.
TEST(Matmul, MatchesReferenceOnAwkwardSizes) {
  uint64_t seed = 100;
  for (int64_t m : {1, 2, 5, 33}) {
    for (int64_t k : {1, 7, 8, 97, 576}) {
      for (int64_t n : {1, 3, 54, 129}) {
        auto x = test::random_vector(size_t(m * k), ++seed);
        auto w = test::random_vector(size_t(n * k), ++seed);
        auto b = test::random_vector(size_t(n), ++seed);
        std::vector<float> y(size_t(m * n)), ref(size_t(m * n));
        for (const float* bias : {static_cast<const float*>(nullptr), static_cast<const float*>(b.data())}) {
          matmul(x.data(), w.data(), bias, y.data(), m, k, n);
          matmul_ref(x.data(), w.data(), bias, ref.data(), m, k, n);
          EXPECT_TRUE(test::all_close(y, ref, 1e-5 * std::sqrt(double(k)), 1e-5)) << m << "x" << k << "x" << n;
        }
      }
    }
  }
}

TEST(Matmul, Avx2RowsMatchScalarRows) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  for (int64_t k : {1, 8, 13, 64, 1536}) {
    const int64_t n = 37;
    auto x = test::random_vector(size_t(k), 7 + uint64_t(k));
    auto w = test::random_vector(size_t(n * k), 8 + uint64_t(k));
    std::vector<float> y(static_cast<size_t>(n), -999.0f), ref(static_cast<size_t>(n), -999.0f);
    matvec_rows_avx2(x.data(), w.data(), y.data(), k, 3, 35);
    matvec_rows_ref(x.data(), w.data(), ref.data(), k, 3, 35);
    EXPECT_TRUE(test::all_close(y, ref, 1e-5 * std::sqrt(double(k)), 1e-5)) << "k=" << k;
    EXPECT_EQ(y[0], -999.0f);   // rows outside [3, 35) untouched
    EXPECT_EQ(y[36], -999.0f);
  }
}

// The batched decode product must equal the one-row product bit for bit (a sequence
// decodes to the same tokens alone or in a batch), and the reference within f32 error.
TEST(Matmul, DecodeBatchEqualsOneRowAtATime) {
  uint64_t seed = 900;
  for (int64_t m : {2, 3, 4, 5, 8, 11}) {
    for (int64_t k : {1, 8, 13, 576}) {
      for (int64_t n : {1, 2, 3, 97, 130}) {
        auto x = test::random_vector(size_t(m * k), ++seed);
        auto w = test::random_vector(size_t(n * k), ++seed);
        auto b = test::random_vector(size_t(n), ++seed);
        std::vector<float> y(size_t(m * n)), one(static_cast<size_t>(n)), ref(size_t(m * n));
        matmul_decode(x.data(), w.data(), b.data(), y.data(), m, k, n);
        matmul_ref(x.data(), w.data(), b.data(), ref.data(), m, k, n);
        EXPECT_TRUE(test::all_close(y, ref, 1e-5 * std::sqrt(double(k)), 1e-5)) << m << "x" << k << "x" << n;
        for (int64_t i = 0; i < m; ++i) {
          matmul(x.data() + i * k, w.data(), b.data(), one.data(), 1, k, n);
          for (int64_t j = 0; j < n; ++j)
            ASSERT_EQ(y[size_t(i * n + j)], one[size_t(j)]) << "row " << i << " col " << j << " of " << m << "x" << k << "x" << n;
        }
      }
    }
  }
}

TEST(Matmul, Avx2BatchRowsMatchScalarRows) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  const int64_t m = 6, k = 97, n = 41;
  auto x = test::random_vector(size_t(m * k), 31);
  auto w = test::random_vector(size_t(n * k), 32);
  std::vector<float> y(size_t(m * n), -999.0f), ref(size_t(m * n), -999.0f);
  matmul_rows_avx2(x.data(), m, w.data(), y.data(), k, n, 3, 40);
  matmul_rows_ref(x.data(), m, w.data(), ref.data(), k, n, 3, 40);
  EXPECT_TRUE(test::all_close(y, ref, 1e-5 * std::sqrt(double(k)), 1e-5));
  for (int64_t i = 0; i < m; ++i) {  // columns outside [3, 40) untouched
    EXPECT_EQ(y[size_t(i * n + 2)], -999.0f);
    EXPECT_EQ(y[size_t(i * n + 40)], -999.0f);
  }
}

}  // namespace
}  // namespace oscar
