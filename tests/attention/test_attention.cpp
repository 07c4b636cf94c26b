#include <gtest/gtest.h>

#include "../test_util.h"
#include "oscar/attention/attention.h"
#include "oscar/attention/attention_decode_kernels.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {
namespace {

struct Filled {
  KvCache cache;
  SeqId seq;
  std::vector<float> k, v;  // [n_kv_heads, n, d] f32 as stored (bf16-rounded when bf16)
};

Filled fill_cache(const AttentionShape& s, KvDtype dt, int64_t n, uint64_t seed) {
  KvSpec spec;
  spec.dtype = dt;
  spec.block_tokens = 16;
  Filled f{KvCache(KvShape{1, s.n_kv_heads, s.head_dim}, spec, n + 40), 0, {}, {}};
  f.seq = f.cache.add_sequence();
  const int64_t row = int64_t(s.n_kv_heads) * s.head_dim;
  auto k = test::random_vector(size_t(n * row), seed, -2, 2), v = test::random_vector(size_t(n * row), seed + 1);
  EXPECT_TRUE(f.cache.reserve(f.seq, n));
  f.cache.write(0, f.seq, 0, n, k.data(), v.data());
  f.cache.commit(f.seq, n);
  f.k.resize(size_t(n * row));
  f.v.resize(size_t(n * row));
  for (int h = 0; h < s.n_kv_heads; ++h)
    f.cache.gather_fp(0, f.seq, h, n, f.k.data() + h * n * s.head_dim, f.v.data() + h * n * s.head_dim);
  return f;
}

// Decode kernels (scalar and AVX2, split over chunks) against the double reference.
// f32 accumulation over ≤ 1100 keys: 2e-5 absolute on outputs of magnitude ≤ 1.
TEST(Attention, DecodeMatchesReference) {
  for (auto [heads, kv_heads, d] : {std::tuple{9, 3, 64}, std::tuple{12, 2, 128}, std::tuple{4, 4, 32}}) {
    const AttentionShape s{heads, kv_heads, d};
    for (KvDtype dt : {KvDtype::f32, KvDtype::bf16}) {
      for (int64_t n : {1, 54, 97, 256, 257, 1100}) {
        Filled f = fill_cache(s, dt, n, uint64_t(n * 7 + d));
        auto q = test::random_vector(size_t(heads * d), uint64_t(n + 99), -2, 2);
        std::vector<float> ref(size_t(heads * d)), got(size_t(heads * d), NAN), got_ref(size_t(heads * d), NAN);
        attention_ref(s, q.data(), 1, n - 1, f.k.data(), f.v.data(), n, ref.data());
        attention_decode(s, f.cache.view(0, f.seq, n), q.data(), got.data());
        attention_decode_ref(s, f.cache.view(0, f.seq, n), q.data(), got_ref.data());
        EXPECT_TRUE(test::all_close(got, ref, 2e-5, 1e-4)) << heads << "/" << kv_heads << " d=" << d << " n=" << n;
        EXPECT_TRUE(test::all_close(got_ref, ref, 1e-6, 1e-5)) << "decode ref, n=" << n;
      }
    }
  }
}

TEST(Attention, Avx2ChunkMatchesScalarChunk) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  const AttentionShape s{6, 1, 128};
  Filled f = fill_cache(s, KvDtype::bf16, 1500, 5);
  auto q = test::random_vector(size_t(6 * 128), 6);
  const KvSeqView view = f.cache.view(0, f.seq, 1500);
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 1500}, {17, 18}, {100, 1300}}) {
    DecodeChunk c{view, 0, b, e, q.data(), 6, 0.0883883f};
    SoftmaxPartial pa[6], pb[6];
    std::vector<float> oa(6 * 128), ob(6 * 128);
    decode_chunk_avx2(c, pa, oa.data());
    decode_chunk_scalar(c, pb, ob.data());
    for (int g = 0; g < 6; ++g) {
      // Partials may use different maxima when the AVX2 kernel folds sub-chunks; compare normalized.
      for (int i = 0; i < 128; ++i) {
        oa[size_t(g * 128 + i)] /= pa[g].l;
        ob[size_t(g * 128 + i)] /= pb[g].l;
      }
    }
    EXPECT_TRUE(test::all_close(oa, ob, 2e-5, 1e-4)) << b << ".." << e;
  }
}

// Prefill through sgemm, starting from an empty cache and continuing a filled one.
TEST(Attention, PrefillMatchesReference) {
  for (auto [heads, kv_heads, d] : {std::tuple{9, 3, 64}, std::tuple{12, 2, 128}}) {
    const AttentionShape s{heads, kv_heads, d};
    for (int64_t n : {1, 54, 300}) {
      for (int64_t pos0 : {0, 37}) {
        Filled f = fill_cache(s, KvDtype::f32, pos0 + n, uint64_t(n + pos0));
        auto q = test::random_vector(size_t(n * heads * d), uint64_t(n * 3 + 1), -2, 2);
        std::vector<float> ref(q.size()), got(q.size(), NAN);
        attention_ref(s, q.data(), n, pos0, f.k.data(), f.v.data(), pos0 + n, ref.data());
        attention_prefill(s, f.cache, 0, f.seq, q.data(), n, pos0, got.data());
        EXPECT_TRUE(test::all_close(got, ref, 2e-5, 1e-4)) << "n=" << n << " pos0=" << pos0;
      }
    }
  }
}

}  // namespace
}  // namespace oscar
