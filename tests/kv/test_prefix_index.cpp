// PrefixIndex, the prefix cache's key chain and hit rule that the CPU and GPU caches share:
// keys depend on every earlier token and on the salt; lookups stop at the first missing
// block and leave two tokens to compute; the hit rule asks for history pages inside
// [S, h(P)) and fp pages elsewhere; eviction takes the least recently used entry it may.
#include <gtest/gtest.h>

#include "oscar/kv/prefix_index.h"
#include "oscar/kv/window_rule.h"

namespace oscar {
namespace {

PrefixWindows windows(bool quantized) {
  // B = 16, S = 16, W = 32: h(t) = 16 + max(0, t − 48).
  return PrefixWindows{16, 16, quantized, [](int64_t t) { return history_boundary(t, 16, 32); }};
}

std::vector<int32_t> tokens(int n, int32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = seed + 7 * i;
  return t;
}

TEST(PrefixIndex, KeysChainEveryEarlierTokenAndTheSalt) {
  PrefixIndex a, b;
  a.enable("model A", windows(true));
  b.enable("model B", windows(true));
  std::vector<int32_t> t = tokens(64, 3);
  const auto ka = a.keys(t, 4);
  EXPECT_EQ(ka, a.keys(t, 4));
  EXPECT_NE(ka[0], b.keys(t, 4)[0]);
  t[20] += 1;  // block 1 changes: its key and every later key change, block 0's does not
  const auto kc = a.keys(t, 4);
  EXPECT_EQ(kc[0], ka[0]);
  for (int i = 1; i < 4; ++i) EXPECT_NE(kc[size_t(i)], ka[size_t(i)]) << i;
}

TEST(PrefixIndex, FindStopsAtTheFirstMissAndLeavesTwoTokens) {
  PrefixIndex ix;
  ix.enable("m", windows(false));
  const std::vector<int32_t> t = tokens(66, 1);
  const auto keys = ix.keys(t, 4);
  for (int b : {0, 1, 3}) ix.entry(keys[size_t(b)]).fp = b;
  EXPECT_EQ(ix.find(t).size(), 2u);  // block 2 is missing
  ix.entry(keys[2]).fp = 2;
  EXPECT_EQ(ix.find(t).size(), 4u);  // (66 − 2) / 16 = 4 blocks may be looked up
  EXPECT_EQ(ix.find(std::span<const int32_t>(t).first(65)).size(), 3u);
  EXPECT_EQ(ix.stats().queries, 4 + 4 + 3);
}

TEST(PrefixIndex, HitRuleAsksForTheWindowsPages) {
  PrefixIndex ix;
  ix.enable("m", windows(true));
  // At P = 96: sink block 0 fp, history [16, h(96) = 64) = blocks 1..3, recent blocks 4, 5 fp.
  std::vector<PrefixEntry> e(6);
  std::vector<PrefixEntry*> found;
  for (auto& x : e) found.push_back(&x);
  for (int b = 0; b < 6; ++b) EXPECT_EQ(ix.needs_history(b, 6), b >= 1 && b <= 3) << b;
  e[0].fp = 0;
  for (int b = 1; b < 4; ++b) e[size_t(b)].history = b;
  e[4].fp = 4;
  // Block 5 has no fp page; shorter prefixes have less history (h(80) = 48, h(64) = 32) and
  // need fp pages for blocks 1..3, which only have history: the sink block alone is usable.
  EXPECT_EQ(ix.usable_blocks(found), 1);
  e[5].fp = 5;
  EXPECT_EQ(ix.usable_blocks(found), 6);
  EXPECT_EQ(ix.usable_blocks(found, [](int64_t n) { return n < 6; }), 1);
  PrefixIndex plain;
  plain.enable("m", windows(false));
  EXPECT_FALSE(plain.needs_history(2, 6));
}

TEST(PrefixIndex, EvictsTheLeastRecentlyUsedEntryItMay) {
  PrefixIndex ix;
  ix.enable("m", windows(false));
  const std::vector<int32_t> t = tokens(64, 5);
  const auto keys = ix.keys(t, 4);
  for (int b = 0; b < 4; ++b) ix.entry(keys[size_t(b)]).fp = b;
  ix.touch(ix.entry(keys[0]));  // block 0 is now the newest
  std::vector<int32_t> released;
  const auto release = [&](const PrefixEntry& e) { released.push_back(e.fp); };
  EXPECT_TRUE(ix.evict_one([](const PrefixEntry& e) { return e.fp != 1; }, release));
  EXPECT_TRUE(ix.evict_one([](const PrefixEntry&) { return true; }, release));
  EXPECT_FALSE(ix.evict_one([](const PrefixEntry&) { return false; }, release));
  EXPECT_EQ(released, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(ix.stats().entries, 2);
}

// A prefix put or touched as one ends with its first block the most recently used: its
// deepest block is evicted first, then the next deepest.
TEST(PrefixIndex, APrefixIsEvictedFromItsEnd) {
  PrefixIndex ix;
  ix.enable("m", windows(false));
  const std::vector<int32_t> t = tokens(64, 6);
  const auto keys = ix.keys(t, 4);
  ix.put_prefix(keys, [](int64_t b, PrefixEntry& e) { e.fp = b < 3 ? int32_t(b) : -1; });  // block 3: nothing to share
  EXPECT_EQ(ix.stats().entries, 3);
  std::vector<int32_t> released;
  const auto release = [&](const PrefixEntry& e) { released.push_back(e.fp); };
  const auto any = [](const PrefixEntry&) { return true; };
  EXPECT_TRUE(ix.evict_one(any, release));
  std::vector<PrefixEntry*> found = ix.find(t);
  ASSERT_EQ(found.size(), 2u);
  ix.touch_prefix(found);  // attached again: the first block newest once more
  EXPECT_TRUE(ix.evict_one(any, release));
  EXPECT_TRUE(ix.evict_one(any, release));
  EXPECT_EQ(released, (std::vector<int32_t>{2, 1, 0}));
}

}  // namespace
}  // namespace oscar
