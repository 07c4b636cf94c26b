// The runner's swap space on the CPU: a sequence swapped out after some decode steps and
// back in (its pages meanwhile reused by another sequence) gives, step after step, bit for
// bit the logits of a twin that never left, for bf16 and mixed INT2 caches. A swap that
// does not fit the space is refused with nothing changed, and a swapped sequence's bytes
// are counted until it is restored or dropped. Recomputing instead (its prompt and
// generated tokens prefilled at once) is only close: its sums round differently.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../runner_steps.h"
#include "../tiny_model.h"
#include "oscar/engine/cpu_runner.h"

namespace oscar::engine {
namespace {

std::vector<int32_t> prompt(uint64_t seed, size_t n) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t((seed * 7919 + i * 31 + i * i) % 50);
  return t;
}

using test::argmax_of;
using test::step_logits;

class Swap : public ::testing::TestWithParam<std::string> {};

TEST_P(Swap, RestoredSequenceGoesOnBitForBit) {
  Transformer t(test::tiny_model(true, 5, 2, 16));
  t.configure_kv(test::tiny_kv_spec(GetParam(), 4, 8, 16));
  CpuRunner r(t, t.make_cache(KvPages{40, 160}));
  const std::vector<int32_t> p = prompt(3, 37);
  const SeqId twin = r.add_sequence(), moved = r.add_sequence();
  std::vector<float> lt = step_logits(r, twin, p), lm = step_logits(r, moved, p);
  std::vector<int32_t> generated;
  for (int i = 0; i < 9; ++i) {  // decode steps, past a page and into history
    ASSERT_EQ(lt, lm);
    const int32_t next = argmax_of(lt);
    generated.push_back(next);
    lt = step_logits(r, twin, std::span<const int32_t>(&next, 1));
    lm = step_logits(r, moved, std::span<const int32_t>(&next, 1));
  }
  const int64_t length = r.length(moved);

  // Too small a space: refused, the sequence untouched.
  r.set_swap_space(1000);
  EXPECT_EQ(r.swap_out(moved), -1);
  EXPECT_EQ(r.length(moved), length);
  r.set_swap_space(int64_t(1) << 24);
  const KvPages free_before = r.free_pages();
  const int64_t h = r.swap_out(moved);
  ASSERT_GE(h, 0);
  const KvPages need = r.swap_need(h);
  EXPECT_EQ(need.fp, r.pages_for_length(length).fp);
  EXPECT_EQ(need.history, r.pages_for_length(length).history);
  EXPECT_EQ(r.free_pages().fp, free_before.fp + need.fp);
  EXPECT_GT(r.swap_stats().used_bytes, 0);
  EXPECT_EQ(r.swap_stats().images, 1);

  // Another sequence writes its rows into the freed pages, and leaves.
  const SeqId other = r.add_sequence();
  step_logits(r, other, prompt(9, 60));
  r.free_sequence(other);

  const SeqId back = r.swap_in(h);
  ASSERT_GE(back, 0);
  EXPECT_EQ(r.length(back), length);
  EXPECT_EQ(r.swap_stats().used_bytes, 0);
  EXPECT_EQ(r.swap_stats().images, 0);
  ASSERT_NO_FATAL_FAILURE(test::expect_lockstep(r, twin, back, lt, 12)) << "after swap_in";

  // Recomputing the same tokens through prefill: close, not necessarily equal.
  const SeqId again = r.add_sequence();
  std::vector<int32_t> all = p;
  all.insert(all.end(), generated.begin(), generated.end());
  const std::vector<float> lr = step_logits(r, again, all);
  const SeqId ref = r.add_sequence();
  std::vector<float> lref = step_logits(r, ref, p);
  for (size_t i = 0; i < generated.size(); ++i) lref = step_logits(r, ref, std::span<const int32_t>(&generated[i], 1));
  double num = 0, den = 0;
  for (size_t j = 0; j < lr.size(); ++j) num += double(lr[j] - lref[j]) * (lr[j] - lref[j]), den += double(lref[j]) * lref[j];
  EXPECT_LT(std::sqrt(num / den), 1e-2) << "recomputed logits far from the decoded ones";
  RecordProperty("recompute_rel_l2", std::to_string(std::sqrt(num / den)));

  // A swapped sequence that ends while out gives its bytes back.
  const int64_t h2 = r.swap_out(back);
  ASSERT_GE(h2, 0);
  r.swap_drop(h2);
  EXPECT_EQ(r.swap_stats().used_bytes, 0);
}

INSTANTIATE_TEST_SUITE_P(Kv, Swap, ::testing::Values("bf16", "int2"));

}  // namespace
}  // namespace oscar::engine
