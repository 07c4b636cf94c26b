// The prefix cache of DeviceRunner, on the GPU (skipped where there is none): a tiny BF16
// model, int2 with sink 16 and window 32 (history pages of 64 rows, so a hit ends inside
// one and copies it), and bf16.
//  * a hit attaches whole pages; the rest of the prompt and the greedy continuation then
//    give the logits of a from-scratch run (same kernels, same chunks after the hit);
//  * pages are shared by reference: freeing every sequence leaves only cache-held pages,
//    which count as free and are evicted when a step needs them.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gpu_test_util.h"
#include "oscar/core/dtype.h"
#include "oscar/engine/cuda/device_runner.h"

namespace oscar {
namespace {

Transformer tiny(const std::string& kv) { return test::tiny_device_model(kv, 33); }

std::vector<int32_t> prompt(uint64_t seed, size_t n) {
  std::vector<int32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = int32_t((seed * 131 + i * 17 + (i * i) % 7) % 50);
  return p;
}

struct Fed {
  std::vector<float> last_logits;  // after the last token fed
  int32_t next = -1;               // its greedy id
};

// Feeds tokens[from, end) in chunks of `chunk`.
Fed feed(DeviceRunner& r, SeqId seq, const std::vector<int32_t>& tokens, int64_t from, int64_t chunk) {
  engine::Batch b;
  engine::StepOutput out;
  for (int64_t at = from; at < int64_t(tokens.size()); at += chunk) {
    const int64_t m = std::min<int64_t>(chunk, int64_t(tokens.size()) - at);
    b.clear();
    b.add(seq, at, std::span<const int32_t>(tokens).subspan(size_t(at), size_t(m)));
    r.run(b, out);
  }
  return {std::vector<float>(out.logits.begin(), out.logits.begin() + r.n_vocab()), out.argmax.at(0)};
}

// n greedy tokens from `id` on.
std::vector<int32_t> decode(DeviceRunner& r, SeqId seq, int32_t id, int n) {
  engine::Batch b;
  engine::StepOutput out;
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) {
    ids.push_back(id);
    b.clear();
    b.add(seq, r.length(seq), std::span<const int32_t>(&id, 1), false);
    r.run(b, out);
    id = out.argmax[0];
  }
  return ids;
}

class DevicePrefixCache : public ::testing::TestWithParam<std::string> {};

TEST_P(DevicePrefixCache, HitGivesTheMissLogitsAndTokens) {
  if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  Transformer t = tiny(GetParam());
  const int64_t ctx = 512;
  DeviceRunner r(t, plan_device_kv(t, 0, 4, ctx), 4, ctx);
  EXPECT_EQ(r.enable_prefix_cache("test"), 16);
  // 300 tokens: the hit is 288 tokens; int2's history ends at h(288) = 256, inside the
  // history page of rows [208, 272): that page is copied.
  const std::vector<int32_t> a = prompt(5, 300);
  const SeqId x = r.add_sequence();
  EXPECT_EQ(r.attach_prefix(x, a), 0);
  // The miss runs the prompt as the hit will: 288 tokens, then the rest.
  std::vector<int32_t> head(a.begin(), a.begin() + 288);
  feed(r, x, head, 0, 128);
  const Fed miss = feed(r, x, a, 288, 1024);
  r.register_prefix(x, a);  // as the server does, once the prompt is in
  const std::vector<int32_t> miss_ids = decode(r, x, miss.next, 8);  // x writes on into the page y copies

  const SeqId y = r.add_sequence();
  ASSERT_EQ(r.attach_prefix(y, a), 288);
  EXPECT_EQ(r.length(y), 288);
  const Fed hit = feed(r, y, a, 288, 1024);
  float worst = 0.0f;
  for (size_t i = 0; i < miss.last_logits.size(); ++i)
    worst = std::max(worst, std::fabs(miss.last_logits[i] - hit.last_logits[i]));
  EXPECT_EQ(worst, 0.0f) << "the hit's logits differ from the miss's";
  EXPECT_EQ(decode(r, y, hit.next, 8), miss_ids);
  const PrefixCacheStats st = r.prefix_stats();
  EXPECT_EQ(st.hits, 18);
  EXPECT_EQ(st.queries, 2 * 18);

  // A prompt that differs in its 40th token shares only the first two blocks; int2 only the
  // sink's: at P = 32 it needs block 1's fp page, released once x's history passed it.
  std::vector<int32_t> b = a;
  b[40] = (b[40] + 1) % 50;
  const SeqId z = r.add_sequence();
  EXPECT_EQ(r.attach_prefix(z, b), GetParam() == "bf16" ? 32 : 16);
  r.free_sequence(z);

  // From scratch in one launch (other chunks than the miss above): the same greedy tokens,
  // and logits equal to rounding (GEMM shapes differ with the chunk).
  const SeqId w = r.add_sequence();
  const Fed scratch = feed(r, w, a, 0, 1024);
  float scale = 0.0f, diff = 0.0f;
  for (size_t i = 0; i < scratch.last_logits.size(); ++i) {
    scale = std::max(scale, std::fabs(scratch.last_logits[i]));
    diff = std::max(diff, std::fabs(scratch.last_logits[i] - hit.last_logits[i]));
  }
  std::printf("    one-chunk prefill vs hit: max |logit diff| %.3g (max |logit| %.3g)\n", diff, scale);
  EXPECT_LE(diff, 1e-2f * scale);
  EXPECT_EQ(decode(r, w, scratch.next, 8), miss_ids);
}

TEST_P(DevicePrefixCache, CachedPagesCountAsFreeAndAreEvicted) {
  if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
  Transformer t = tiny(GetParam());
  const int64_t ctx = 512;
  DeviceRunner r(t, plan_device_kv(t, 0, 2, ctx), 2, ctx);
  r.enable_prefix_cache("test");
  const KvPages all = r.free_pages();
  const std::vector<int32_t> a = prompt(9, 400);
  const SeqId x = r.add_sequence();
  feed(r, x, a, 0, 256);
  r.register_prefix(x, a);
  const SeqId y = r.add_sequence();
  ASSERT_GT(r.attach_prefix(y, a), 0);
  r.free_sequence(x);
  r.free_sequence(y);
  const KvSegmentUsage u = r.usage();
  EXPECT_GT(u.cached_fp_pages, 0);
  EXPECT_EQ(u.sink_pages + u.recent_pages + u.history_pages, 0);
  const KvPages free = r.free_pages();
  EXPECT_EQ(free.fp, all.fp);
  EXPECT_EQ(free.history, all.history);
  // Two fresh sequences of almost the whole context: with int2 they need 14 of the 16
  // history pages, 6 of which the cache holds, so it gives some back.
  std::vector<SeqId> seqs = {r.add_sequence(), r.add_sequence()};
  for (uint64_t k = 0; k < 2; ++k) feed(r, seqs[k], prompt(20 + k, size_t(ctx - 8)), 0, 256);
  if (GetParam() == "int2") {
    EXPECT_LT(r.prefix_stats().entries, 400 / 16);
  }
}

INSTANTIATE_TEST_SUITE_P(Kv, DevicePrefixCache, ::testing::Values("int2", "bf16"));

}  // namespace
}  // namespace oscar
