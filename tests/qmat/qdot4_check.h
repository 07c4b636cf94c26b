// The check both qdot test files run on the four-row kernels: on each of four activation
// rows (ActQ8Block or ActQ8KBlock), laid out `stride` blocks apart, qdot4 must give the
// one-row kernel's float bit for bit (the multi-row prefill relies on it for batch invariance).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "oscar/qmat/qdot.h"

namespace oscar::qmat {

template <class Act>
void expect_four_rows_equal_one(QDot4Of<Act> dot4, QDotOf<Act> one, const void* w, int64_t k,
                                const std::vector<std::vector<Act>>& rows, int64_t stride, const std::string& what) {
  ASSERT_EQ(rows.size(), 4u);
  std::vector<Act> x(static_cast<size_t>(4 * stride));
  for (size_t r = 0; r < 4; ++r) std::copy(rows[r].begin(), rows[r].end(), x.begin() + int64_t(r) * stride);
  float out[4];
  dot4(w, x.data(), stride, k, out);
  for (int r = 0; r < 4; ++r) {
    const float want = one(w, x.data() + r * stride, k);
    EXPECT_EQ(std::memcmp(&out[r], &want, 4), 0)
        << what << " k " << k << " row " << r << ": " << out[r] << " vs " << want;
  }
}

}  // namespace oscar::qmat
