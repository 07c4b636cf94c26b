#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"

namespace oscar {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 64, 1000, 1001}) {
      for (int64_t grain : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
          EXPECT_EQ(b % grain, 0);
          for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(ThreadPool, RethrowsAndStaysUsable) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, 1, [](int64_t b, int64_t) { if (b > 0) fail("boom"); }), Error);
  std::atomic<int64_t> sum = 0;
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) sum += i; });
  EXPECT_EQ(sum.load(), 4950);
}

}  // namespace
}  // namespace oscar
