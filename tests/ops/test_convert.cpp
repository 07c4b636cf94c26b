#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "../test_util.h"
#include "oscar/ops/convert.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {
namespace {

TEST(Convert, Avx2Bf16IsBitExact) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  for (int64_t n : {0, 1, 7, 8, 9, 1000}) {
    auto x = test::random_vector(size_t(n), 3 + uint64_t(n), -1e3f, 1e3f);
    if (n >= 8) {  // special values inside the vector body
      x[0] = std::numeric_limits<float>::quiet_NaN();
      x[1] = INFINITY;
      x[2] = -0.0f;
      x[3] = 1e-40f;  // subnormal
      uint32_t tie = 0x3f808000;
      std::memcpy(&x[4], &tie, 4);
    }
    std::vector<bf16> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    f32_to_bf16_avx2(x.data(), a.data(), n);
    f32_to_bf16_ref(x.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[size_t(i)].bits, b[size_t(i)].bits) << i;
    std::vector<float> ya(static_cast<size_t>(n)), yb(static_cast<size_t>(n));
    bf16_to_f32_avx2(a.data(), ya.data(), n);
    bf16_to_f32_ref(a.data(), yb.data(), n);
    EXPECT_EQ(std::memcmp(ya.data(), yb.data(), size_t(n) * 4), 0);
  }
}

}  // namespace
}  // namespace oscar
