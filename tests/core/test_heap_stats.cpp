// live_heap_bytes follows a 64 MiB allocation up and back down (glibc's count, or ASan's in
// a sanitized build).
#include <gtest/gtest.h>

#include <memory>

#include "oscar/core/heap_stats.h"

namespace oscar {
namespace {

TEST(HeapStats, FollowsALargeAllocation) {
  const int64_t before = live_heap_bytes();
  if (before < 0) GTEST_SKIP() << "no allocator statistics in this build";
  constexpr int64_t kBytes = int64_t(64) << 20;
  auto block = std::make_unique<char[]>(size_t(kBytes));
  block[0] = 1, block[kBytes - 1] = 1;
  const int64_t during = live_heap_bytes();
  EXPECT_GE(during - before, kBytes - (int64_t(1) << 20)) << before << " -> " << during;
  block.reset();
  const int64_t after = live_heap_bytes();
  EXPECT_LE(after - before, int64_t(1) << 20) << before << " -> " << after;
}

}  // namespace
}  // namespace oscar
