#include <gtest/gtest.h>

#include "../test_util.h"
#include "oscar/core/error.h"
#include "oscar/kv/kv_cache.h"
#include "oscar/ops/convert.h"

namespace oscar {
namespace {

TEST(BlockAllocator, ExactAccounting) {
  BlockAllocator a(3);
  EXPECT_EQ(a.n_free(), 3);
  const int32_t b0 = a.allocate(), b1 = a.allocate(), b2 = a.allocate();
  EXPECT_EQ(a.n_free(), 0);
  EXPECT_FALSE(a.can_allocate(1));
  EXPECT_THROW(a.allocate(), Error);
  a.release(b1);
  EXPECT_THROW(a.release(b1), Error);  // double free
  EXPECT_THROW(a.release(7), Error);
  EXPECT_EQ(a.allocate(), b1);
  (void)b0; (void)b2;
}

// Write rows token by token and in batches across page boundaries, read them back.
TEST(KvCache, RoundTripAcrossPagesAndSequences) {
  const KvShape shape{2, 3, 16};
  for (KvDtype dt : {KvDtype::f32, KvDtype::bf16}) {
    KvSpec spec;
    spec.dtype = dt;
    spec.block_tokens = 5;  // does not divide the lengths used below
    KvCache cache(shape, spec, 100);
    const SeqId a = cache.add_sequence(), b = cache.add_sequence();
    const int row = shape.n_kv_heads * shape.head_dim;
    auto ka = test::random_vector(size_t(23 * row), 1), va = test::random_vector(size_t(23 * row), 2);
    auto kb = test::random_vector(size_t(11 * row), 3), vb = test::random_vector(size_t(11 * row), 4);
    // a: 1 + 6 + 16 tokens; b: 11 tokens interleaved with a's writes.
    int64_t done = 0;
    for (int64_t n : {1, 6, 16}) {
      ASSERT_TRUE(cache.reserve(a, n));
      for (int l = 0; l < shape.n_layers; ++l)
        cache.write(l, a, done, n, ka.data() + done * row, va.data() + done * row);
      cache.commit(a, n);
      done += n;
      if (n == 6) {
        ASSERT_TRUE(cache.reserve(b, 11));
        for (int l = 0; l < shape.n_layers; ++l) cache.write(l, b, 0, 11, kb.data(), vb.data());
        cache.commit(b, 11);
      }
    }
    EXPECT_EQ(cache.length(a), 23);
    EXPECT_EQ(cache.length(b), 11);
    EXPECT_EQ(cache.free_tokens(), 100 - 25 - 15);  // 5 + 3 pages of 5
    for (auto [seq, n, k, v] : {std::tuple{a, 23, &ka, &va}, std::tuple{b, 11, &kb, &vb}}) {
      for (int h = 0; h < shape.n_kv_heads; ++h) {
        std::vector<float> kg(size_t(n * 16)), vg(size_t(n * 16)), kw(size_t(n * 16)), vw(size_t(n * 16));
        cache.gather_fp(1, seq, h, n, kg.data(), vg.data());
        for (int t = 0; t < n; ++t)
          for (int c = 0; c < 16; ++c) {
            float kx = (*k)[size_t(t * row + h * 16 + c)], vx = (*v)[size_t(t * row + h * 16 + c)];
            if (dt == KvDtype::bf16) { kx = bf16_to_f32(f32_to_bf16(kx)); vx = bf16_to_f32(f32_to_bf16(vx)); }
            kw[size_t(t * 16 + c)] = kx;
            vw[size_t(t * 16 + c)] = vx;
          }
        EXPECT_TRUE(test::all_close(kg, kw, 0, 0));
        EXPECT_TRUE(test::all_close(vg, vw, 0, 0));
      }
    }
    cache.remove_sequence(a);
    EXPECT_EQ(cache.free_tokens(), 100 - 15);
    EXPECT_EQ(cache.bytes_used(b), 11 * cache.bytes_per_token());
  }
}

TEST(KvCache, FullCacheRefusesWithoutChange) {
  KvCache cache(KvShape{1, 1, 8}, KvSpec{}, 64);
  const SeqId s = cache.add_sequence();
  EXPECT_TRUE(cache.reserve(s, 64));
  EXPECT_FALSE(cache.reserve(s, 65));
  EXPECT_EQ(cache.free_tokens(), 0);
  std::vector<float> row(8, 1.0f);
  EXPECT_THROW(cache.write(0, s, 3, 1, row.data(), row.data()), Error);  // not at the end
  EXPECT_THROW(cache.length(42), Error);
}

TEST(KvSpec, ParsesAndRejects) {
  EXPECT_EQ(KvSpec::parse("bf16").dtype, KvDtype::bf16);
  EXPECT_EQ(KvSpec::parse("f32").bits(), 32);
  EXPECT_THROW(KvSpec::parse("int3"), Error);
}

}  // namespace
}  // namespace oscar
