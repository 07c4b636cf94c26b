#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "oscar/core/error.h"
#include "oscar/core/lazy_buffer.h"

namespace oscar {
namespace {

// Resident pages of this process (/proc/self/statm's second field), in bytes.
long resident_bytes() {
  long size = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
  std::fclose(f);
  return resident * sysconf(_SC_PAGESIZE);
}

TEST(LazyBuffer, ZeroFilledAndCommittedOnlyWhereTouched) {
  constexpr size_t kBytes = size_t(256) << 20, kTouched = size_t(16) << 20;
  const long before = resident_bytes();
  ASSERT_GT(before, 0);
  LazyBuffer b(kBytes, "a test buffer");
  ASSERT_EQ(b.size(), kBytes);
  // A zero-filling allocation (std::vector) would make all 256 MiB resident here.
  EXPECT_LT(resident_bytes() - before, long(8) << 20);
  const long page = sysconf(_SC_PAGESIZE);
  for (size_t i = 0; i < kTouched; i += size_t(page)) {
    EXPECT_EQ(b.data()[i], 0) << i;
    b.data()[i] = 1;
  }
  const long grown = resident_bytes() - before;
  EXPECT_GE(grown, long(kTouched) - (long(1) << 20));
  EXPECT_LT(grown, long(kTouched) + (long(8) << 20));
  EXPECT_EQ(b.data()[kBytes - 1], 0);
}

TEST(LazyBuffer, MovesOwnership) {
  LazyBuffer a(4096, "a test buffer");
  a.data()[7] = 42;
  LazyBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data()[7], 42);
  LazyBuffer c;
  c = std::move(b);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(c.data()[7], 42);
  EXPECT_EQ(c.size(), 4096u);
  LazyBuffer empty(0, "nothing");
  EXPECT_EQ(empty.data(), nullptr);
}

TEST(LazyBuffer, RefusedAddressSpaceIsANamedError) {
  try {
    LazyBuffer huge(size_t(1) << 62, "a test buffer");
    FAIL() << "a 4 EiB map was granted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a test buffer"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace oscar
