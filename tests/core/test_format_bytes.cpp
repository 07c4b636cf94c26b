// format_bytes: each unit from its threshold on, two decimals, plain bytes below 1 KiB.
#include <gtest/gtest.h>

#include "oscar/core/format_bytes.h"

namespace oscar {
namespace {

TEST(FormatBytes, UnitsFromTheirThresholds) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes((1LL << 20) - 1), "1024.00 KiB");
  EXPECT_EQ(format_bytes(12LL << 20), "12.00 MiB");
  EXPECT_EQ(format_bytes(3LL << 29), "1.50 GiB");
  EXPECT_EQ(format_bytes(61LL << 30), "61.00 GiB");
}

}  // namespace
}  // namespace oscar
