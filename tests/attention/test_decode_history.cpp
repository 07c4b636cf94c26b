// The history chunk of decode attention: the AVX2 kernel (codes expanded once per GQA head
// tile, scale/zero folded per group, vector exp) and the generic per-row path against the
// scalar double reference (rows dequantized by history_load), on fresh random caches of
// every per-token format, head_dim 64/128/256, GQA groups 1..16, chunks of odd lengths,
// across history block and 256-row sub-chunk boundaries, with and without score_add.
// Also the AVX2 pieces beside it: the fp-row chunk and the vector exp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "../test_util.h"
#include "oscar/attention/attention_decode_kernels.h"
#include "oscar/kv/history_formats.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {
namespace {

struct HistoryCache {
  std::vector<HistoryFormat> kf, vf;
  KvCache cache;
  SeqId seq = 0;
};

// One layer, n tokens written and demoted: history [sink, n − recent) for per-token formats.
// k_wide / v_wide: wider codes for the keys or the values alone (--kv-k-type / --kv-v-type).
std::unique_ptr<HistoryCache> make_cache(KvQuant q, int n_kv_heads, int d, int group, int64_t n, uint64_t seed,
                                         KvQuant k_wide = KvQuant::none, KvQuant v_wide = KvQuant::none) {
  KvSpec spec;
  spec.mode = kv_quant_name(q);
  spec.quant = q;
  spec.sink = 3;
  spec.recent = 5;
  spec.block_tokens = 16;
  spec.group = group;
  spec.k_clip = q == KvQuant::kivi2 ? 0.0f : 0.97f;
  spec.v_clip = q == KvQuant::kivi2 ? 0.0f : 0.95f;
  spec.kivi_tokens = 16;
  spec.k_quant = k_wide, spec.v_quant = v_wide;
  const KvShape shape{1, n_kv_heads, d};
  auto [kf, vf] = make_history_formats(spec, shape, nullptr);
  auto c = std::unique_ptr<HistoryCache>(new HistoryCache{kf, vf, KvCache(shape, spec, n + 64, kf, vf), 0});
  c->seq = c->cache.add_sequence();
  // Keys with a per-channel offset (as real keys have) so the zero points matter.
  auto k = test::random_vector(size_t(n * n_kv_heads * d), seed, -2, 2);
  auto v = test::random_vector(size_t(n * n_kv_heads * d), seed + 1);
  for (size_t i = 0; i < k.size(); ++i) k[i] += float(int(i % size_t(d)) % 7) * 0.5f;
  EXPECT_TRUE(c->cache.reserve(c->seq, n));
  c->cache.write(0, c->seq, 0, n, k.data(), v.data());
  c->cache.demote(0, c->seq, n);
  c->cache.commit(c->seq, n);
  return c;
}

// Normalized outputs o/l of every head of a partial: [G, d].
std::vector<float> normalized(const SoftmaxPartial* part, const std::vector<float>& o, int G, int d) {
  std::vector<float> r(o.size());
  for (int g = 0; g < G; ++g)
    for (int i = 0; i < d; ++i) r[size_t(g * d + i)] = part[g].l > 0.0f ? o[size_t(g * d + i)] / part[g].l : 0.0f;
  return r;
}

double max_abs(const std::vector<float>& x) {
  double m = 0.0;
  for (float v : x) m = std::max(m, double(std::fabs(v)));
  return m;
}

// Tolerance, stated per head: |o/l − ref| ≤ 2e-5 · max |ref| of that head's output, and
// the partial's (m, l) equal to the reference's as l·e^m within 2e-5 relative (f32 sums
// of ≤ 700 rows of dot products over ≤ 256 dims against double).
constexpr double kRelTol = 2e-5;

using ChunkFn = void (*)(const DecodeChunk&, SoftmaxPartial*, float*);

::testing::AssertionResult chunk_matches_ref(ChunkFn fn, const DecodeChunk& c, int d) {
  const int G = c.group;
  SoftmaxPartial pg[kMaxDecodeGroup], pr[kMaxDecodeGroup];
  std::vector<float> og(size_t(G * d), NAN), orf(size_t(G * d), NAN);
  fn(c, pg, og.data());
  decode_chunk_history_ref(c, pr, orf.data());
  const std::vector<float> ng = normalized(pg, og, G, d), nr = normalized(pr, orf, G, d);
  for (int g = 0; g < G; ++g) {
    std::vector<float> a(ng.begin() + g * d, ng.begin() + (g + 1) * d), b(nr.begin() + g * d, nr.begin() + (g + 1) * d);
    const double scale = max_abs(b);
    double worst = 0.0;
    for (int i = 0; i < d; ++i) worst = std::max(worst, std::fabs(double(a[size_t(i)]) - double(b[size_t(i)])));
    if (!(worst <= kRelTol * scale))
      return ::testing::AssertionFailure() << "head " << g << ": max |o/l − ref| " << worst << " > " << kRelTol
                                           << " · " << scale;
    // l·e^m, compared at the reference's max.
    const double lg = double(pg[g].l) * std::exp(double(pg[g].m) - double(pr[g].m));
    if (!(std::fabs(lg - double(pr[g].l)) <= kRelTol * double(pr[g].l)))
      return ::testing::AssertionFailure() << "head " << g << ": l·e^m " << lg << " vs " << pr[g].l << " (m " << pg[g].m
                                           << " vs " << pr[g].m << ")";
  }
  return ::testing::AssertionSuccess();
}

struct Case {
  KvQuant quant;
  int d, group;
  std::vector<int> gqa;
  KvQuant k_wide = KvQuant::none, v_wide = KvQuant::none;  // K and V in different formats
};

TEST(DecodeHistory, Avx2AndGenericMatchReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  const std::vector<Case> cases = {
      {KvQuant::int2, 64, 64, {1, 2, 3, 4, 5, 6, 7, 8, 12, 16}},
      {KvQuant::int2, 64, 32, {1, 3, 6}},
      {KvQuant::int2, 128, 128, {1, 2, 3, 4, 6, 7, 8, 16}},
      {KvQuant::int2, 128, 32, {3, 5}},
      {KvQuant::int2, 256, 256, {1, 3, 8}},
      {KvQuant::int2, 256, 64, {2, 6}},
      {KvQuant::int2_lloyd_max, 64, 64, {3, 7}},
      {KvQuant::int2_lloyd_max_exact, 64, 64, {1, 3, 7}},
      {KvQuant::int2_lloyd_max_exact, 128, 32, {2, 6}},
      {KvQuant::int4, 64, 64, {1, 3, 5, 16}},
      {KvQuant::int4, 128, 32, {4, 6}},
      {KvQuant::int8, 64, 64, {1, 3, 9}},
      {KvQuant::int8, 256, 128, {2, 6}},
      {KvQuant::int2, 64, 64, {1, 3, 5}, KvQuant::int4},
      {KvQuant::int2, 128, 32, {2, 6}, KvQuant::none, KvQuant::int8},
      {KvQuant::int2_lloyd_max_exact, 64, 64, {3}, KvQuant::int8, KvQuant::none},
  };
  const int n_kv_heads = 2;
  const int64_t n = 720;  // history [3, 715): 712 rows, three 256-row sub-chunks
  for (const Case& cs : cases) {
    auto hc = make_cache(cs.quant, n_kv_heads, cs.d, cs.group, n, uint64_t(cs.d * 31 + cs.group + int(cs.quant)),
                         cs.k_wide, cs.v_wide);
    const KvSeqView view = hc->cache.view(0, hc->seq, n);
    ASSERT_EQ(view.k_format->quant, cs.k_wide == KvQuant::none ? cs.quant : cs.k_wide);
    ASSERT_EQ(view.v_format->quant, cs.v_wide == KvQuant::none ? cs.quant : cs.v_wide);
    ASSERT_TRUE(decode_history_avx2_supports(*view.k_format)) << kv_quant_name(cs.quant);
    ASSERT_TRUE(decode_history_avx2_supports(*view.v_format));
    const int64_t hb = view.hist_begin, he = view.hist_end;
    ASSERT_EQ(he - hb, 712);
    // Chunks: one row, odd lengths across 16-row blocks, exactly 256, 257, the whole history.
    const std::vector<std::pair<int64_t, int64_t>> chunks = {
        {hb, hb + 1}, {hb + 13, hb + 14}, {hb + 5, hb + 59}, {hb + 15, hb + 112}, {hb, hb + 256},
        {hb + 1, hb + 258}, {hb + 100, he}, {hb, he}};
    for (int G : cs.gqa) {
      const float scale = 1.0f / std::sqrt(float(cs.d));
      auto q = test::random_vector(size_t(G * cs.d), uint64_t(G * 7 + cs.d), -2, 2);
      for (auto [b, e] : chunks) {
        for (bool with_add : {false, true}) {
          auto add = test::random_vector(size_t(G * (e - b)), uint64_t(b + e), -3, 3);
          for (int kvh = 0; kvh < n_kv_heads; ++kvh) {
            DecodeChunk c{view, kvh, b, e, q.data(), G, scale, with_add ? add.data() : nullptr};
            const std::string what = std::string(kv_quant_name(cs.quant)) + "/K " + kv_quant_name(view.k_format->quant) +
                                     "/V " + kv_quant_name(view.v_format->quant) + " d " + std::to_string(cs.d) + " G " +
                                     std::to_string(cs.group) + " gqa " + std::to_string(G) + " keys [" +
                                     std::to_string(b) + ", " + std::to_string(e) + ")" + (with_add ? " +add" : "") +
                                     " kv head " + std::to_string(kvh);
            EXPECT_TRUE(chunk_matches_ref(decode_chunk_history_avx2, c, cs.d)) << "avx2 " << what;
            if (G <= 3 && kvh == 0) {
              EXPECT_TRUE(chunk_matches_ref(decode_chunk_history_generic, c, cs.d)) << "generic " << what;
            }
          }
        }
      }
    }
  }
}

// The comparison can fail: the reference over keys shifted by one row, or with one query
// head changed, is far outside the tolerance.
TEST(DecodeHistory, ComparisonDetectsAWrongChunk) {
  auto hc = make_cache(KvQuant::int2, 1, 64, 64, 300, 5);
  const KvSeqView view = hc->cache.view(0, hc->seq, 300);
  auto q = test::random_vector(size_t(3 * 64), 9, -2, 2);
  const int64_t b = view.hist_begin;
  DecodeChunk shifted{view, 0, b + 1, b + 41, q.data(), 3, 0.125f};
  SoftmaxPartial p[3];
  std::vector<float> o(3 * 64);
  decode_chunk_history_ref(shifted, p, o.data());
  // A kernel that reads the chunk one row late:
  static const DecodeChunk* truth = nullptr;
  DecodeChunk c{view, 0, b, b + 40, q.data(), 3, 0.125f};
  truth = &shifted;
  ChunkFn late = [](const DecodeChunk&, SoftmaxPartial* part, float* part_o) { decode_chunk_history_ref(*truth, part, part_o); };
  EXPECT_FALSE(chunk_matches_ref(late, c, 64));
  // One head's query perturbed by 1e-3 relative: also caught.
  static std::vector<float> q2;
  q2 = q;
  for (int i = 64; i < 128; ++i) q2[size_t(i)] *= 1.001f;
  static DecodeChunk* other = nullptr;
  DecodeChunk c2{view, 0, b, b + 40, q2.data(), 3, 0.125f};
  other = &c2;
  ChunkFn perturbed = [](const DecodeChunk&, SoftmaxPartial* part, float* part_o) {
    decode_chunk_history_ref(*other, part, part_o);
  };
  EXPECT_FALSE(chunk_matches_ref(perturbed, c, 64));
}

// The vector exp of the softmax weights: within 2 ulp of std::exp (relative 2.4e-7), zero
// below −87.3 where std::exp is below 1.2e-38; sums as the scalar sum to 1e-6.
TEST(DecodeHistory, SoftmaxExpMatchesStdExp) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  for (int64_t n : {0, 1, 7, 8, 9, 100, 257}) {
    auto x = test::random_vector(size_t(n), uint64_t(n + 1), -100.0f, 0.0f);
    if (n > 2) {
      x[0] = 0.0f;
      x[1] = -87.0f;
      x[2] = -1e-30f;
    }
    const float m = 0.5f;
    std::vector<float> got = x;
    std::vector<float> want(static_cast<size_t>(n));
    const float sum = softmax_exp_avx2(got.data(), n, m);
    double want_sum = 0.0;
    for (int64_t i = 0; i < n; ++i) want_sum += (want[size_t(i)] = std::exp(x[size_t(i)] - m));
    EXPECT_TRUE(test::all_close(got, want, 1.2e-38, 2.4e-7)) << "n " << n;
    EXPECT_NEAR(sum, want_sum, 1e-6 * std::max(1.0, want_sum)) << "n " << n;
  }
}

// The fp-row chunk (sink / recent) kernel against the scalar one, over GQA groups 1..16
// and head dims 40..256 (bf16 and f32 rows): the normalized outputs within 2e-5 of the
// largest, l·e^m within 2e-5 relative (both f32).
TEST(DecodeFpChunk, Avx2MatchesScalarOverGroupsAndHeadDims) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  for (KvDtype dt : {KvDtype::bf16, KvDtype::f32}) {
    for (int d : {40, 64, 128, 256}) {
      KvSpec spec;
      spec.dtype = dt;
      spec.block_tokens = 16;
      const int n_kv_heads = 2;
      const int64_t n = 600;
      KvCache cache(KvShape{1, n_kv_heads, d}, spec, n + 16);
      const SeqId seq = cache.add_sequence();
      auto k = test::random_vector(size_t(n * n_kv_heads * d), uint64_t(d), -2, 2);
      auto v = test::random_vector(size_t(n * n_kv_heads * d), uint64_t(d + 1));
      ASSERT_TRUE(cache.reserve(seq, n));
      cache.write(0, seq, 0, n, k.data(), v.data());
      cache.commit(seq, n);
      const KvSeqView view = cache.view(0, seq, n);
      for (int G : {1, 2, 3, 4, 5, 6, 7, 8, 16}) {
        auto q = test::random_vector(size_t(G * d), uint64_t(G * 5 + d), -2, 2);
        for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 1}, {7, 61}, {15, 272}, {0, 600}}) {
          auto add = test::random_vector(size_t(G * (e - b)), uint64_t(e), -1, 1);
          DecodeChunk c{view, 1, b, e, q.data(), G, 1.0f / std::sqrt(float(d)), G % 2 ? add.data() : nullptr};
          SoftmaxPartial pa[kMaxDecodeGroup], pb[kMaxDecodeGroup];
          std::vector<float> oa(size_t(G * d)), ob(size_t(G * d));
          decode_chunk_avx2(c, pa, oa.data());
          decode_chunk_scalar(c, pb, ob.data());
          const std::vector<float> na = normalized(pa, oa, G, d), nb = normalized(pb, ob, G, d);
          EXPECT_TRUE(test::all_close(na, nb, kRelTol * max_abs(nb), 0.0))
              << "d " << d << " gqa " << G << " [" << b << ", " << e << ")";
          for (int g = 0; g < G; ++g)
            EXPECT_NEAR(double(pa[g].l) * std::exp(double(pa[g].m) - double(pb[g].m)), pb[g].l, kRelTol * pb[g].l);
        }
      }
    }
  }
}

}  // namespace
}  // namespace oscar
