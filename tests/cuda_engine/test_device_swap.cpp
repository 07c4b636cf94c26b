// DeviceRunner's swap space, on the GPU (skipped where there is none): a tiny BF16 model,
// int2 (sink 16, window 32, history pages of 64 rows) and bf16, the prefix cache on.
// A sequence that shares prefix pages with another, swapped out after some decode steps
// and back in (its pages meanwhile written by a third sequence), gives bit for bit the
// logits of a twin that never left; a swap the space cannot hold is refused with nothing
// changed; the bytes are counted until restored or dropped.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "../runner_steps.h"
#include "gpu_test_util.h"
#include "oscar/engine/cuda/device_runner.h"
#include "oscar/engine/cuda/pinned_pool.h"

namespace oscar {
namespace {

std::vector<int32_t> prompt(uint64_t seed, size_t n) {
  std::vector<int32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = int32_t((seed * 131 + i * 17 + (i * i) % 7) % 50);
  return p;
}

using test::argmax_of;
using test::step_logits;

class DeviceSwap : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceSwap, RestoredSequenceGoesOnBitForBit) {
  if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  Transformer t = test::tiny_device_model(GetParam(), 33);
  const int64_t ctx = 512;
  DeviceRunner r(t, plan_device_kv(t, 0, 4, ctx), 4, ctx);
  r.enable_prefix_cache("test");
  const std::vector<int32_t> p = prompt(7, 200);
  const SeqId twin = r.add_sequence();
  std::vector<float> lt = step_logits(r, twin, p);
  r.register_prefix(twin, p);
  const SeqId moved = r.add_sequence();
  const int64_t hit = r.attach_prefix(moved, p);
  ASSERT_GT(hit, 0);
  std::vector<float> lm = step_logits(r, moved, std::span<const int32_t>(p).subspan(size_t(hit)));
  for (int i = 0; i < 40; ++i) {  // past a history page's end
    const int32_t next = argmax_of(lt);
    lt = step_logits(r, twin, std::span<const int32_t>(&next, 1));
    lm = step_logits(r, moved, std::span<const int32_t>(&next, 1));
  }
  const int64_t length = r.length(moved);

  r.set_swap_space(1000);
  EXPECT_EQ(r.swap_out(moved), -1);
  EXPECT_EQ(r.length(moved), length);
  r.set_swap_space(int64_t(1) << 30);
  const int64_t h = r.swap_out(moved);
  ASSERT_GE(h, 0);
  // The pages it held: pages_for_length counts one history page ahead (the next step's).
  const KvPages need = r.swap_need(h), at = r.pages_for_length(length);
  EXPECT_EQ(need.fp, at.fp);
  EXPECT_TRUE(need.history == at.history || need.history + 1 == at.history) << need.history << " " << at.history;
  EXPECT_GT(need.history, GetParam() == "int2" ? 0 : -1);
  EXPECT_GT(r.swap_stats().used_bytes, 0);

  const SeqId other = r.add_sequence();  // writes its rows into the freed pages
  step_logits(r, other, prompt(99, 300));
  r.free_sequence(other);

  const SeqId back = r.swap_in(h);
  ASSERT_GE(back, 0);
  EXPECT_EQ(r.length(back), length);
  EXPECT_EQ(r.swap_stats().used_bytes, 0);
  EXPECT_EQ(r.swap_stats().images, 0);
  // Into the next history pages.
  ASSERT_NO_FATAL_FAILURE(test::expect_lockstep(r, twin, back, lt, 80)) << GetParam() << ": after swap_in";
  const int64_t h2 = r.swap_out(back);
  ASSERT_GE(h2, 0);
  r.swap_drop(h2);
  EXPECT_EQ(r.swap_stats().used_bytes, 0);
  r.free_sequence(twin);
  const KvSegmentUsage u = r.usage();
  EXPECT_EQ(u.sink_pages + u.recent_pages + u.history_pages, 0);
}

INSTANTIATE_TEST_SUITE_P(Kv, DeviceSwap, ::testing::Values("int2", "bf16"));

// The swap images' pinned buffers: whole 64 MiB steps, reused by a later image up to twice
// its size, never more pinned than the limit (free buffers are let go first).
TEST(PinnedPool, ReusesBuffersWithinItsLimit) {
  if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  constexpr size_t MiB = size_t(1) << 20;
  PinnedPool pool;
  size_t a_size = 0, b_size = 0, c_size = 0;
  uint8_t* a = pool.take(100 * MiB, 256 * MiB, &a_size);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a_size, 128 * MiB);
  a[0] = 1, a[a_size - 1] = 2;  // host memory, writable
  pool.give(a, a_size);
  uint8_t* b = pool.take(70 * MiB, 256 * MiB, &b_size);
  EXPECT_EQ(b, a) << "a freed buffer up to twice the size is reused";
  EXPECT_EQ(pool.pinned(), 128 * MiB);
  EXPECT_EQ(pool.take(200 * MiB, 256 * MiB, &c_size), nullptr) << "past the limit while b is in use";
  pool.give(b, b_size);
  uint8_t* c = pool.take(200 * MiB, 256 * MiB, &c_size);  // lets the free 128 MiB go, pins 256
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c_size, 256 * MiB);
  EXPECT_EQ(pool.pinned(), 256 * MiB);
  pool.give(c, c_size);
}

}  // namespace
}  // namespace oscar
