// eval-kv's measurement: a one-layer cache fed recorded q/k/v must reproduce exact
// attention when nothing is quantized (with or without a rotation), and its error must
// order the formats the way their bits do.
#include <gtest/gtest.h>

#include "oscar/core/error.h"
#include "oscar/eval/kv_error.h"
#include "oscar/eval/kv_stats.h"
#include "oscar/kv/history_formats.h"
#include "../test_util.h"

namespace oscar {
namespace {

constexpr int kHeads = 6, kKvHeads = 2, kDim = 64;
const AttentionShape kShape{kHeads, kKvHeads, kDim};

LayerQkv random_qkv(int64_t n, uint64_t seed) {
  LayerQkv x;
  x.q = test::random_vector(size_t(n * kHeads * kDim), seed, -3, 3);  // peaked attention: outputs far from 0
  x.k = test::random_vector(size_t(n * kKvHeads * kDim), seed + 1, -2, 2);
  x.v = test::random_vector(size_t(n * kKvHeads * kDim), seed + 2, -1, 1);
  return x;
}

// attention_ref wants K/V as [n_kv_heads, n, d].
std::vector<float> exact_output(const LayerQkv& x, int64_t n, int64_t n_q) {
  std::vector<float> k(size_t(n * kKvHeads * kDim)), v(k.size());
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < kKvHeads; ++h)
      for (int i = 0; i < kDim; ++i) {
        k[size_t((h * n + t) * kDim + i)] = x.k[size_t((t * kKvHeads + h) * kDim + i)];
        v[size_t((h * n + t) * kDim + i)] = x.v[size_t((t * kKvHeads + h) * kDim + i)];
      }
  std::vector<float> out(size_t(n_q * kHeads * kDim));
  attention_ref(kShape, x.q.data() + (n - n_q) * kHeads * kDim, n_q, n - n_q, k.data(), v.data(), n, out.data());
  return out;
}

struct Measured {
  double error, bits;
};

Measured measure(const char* kv, const LayerQkv& x, int64_t n, int64_t n_q, const KvRotator* rot = nullptr,
                 KvQuant k_quant = KvQuant::none, KvQuant v_quant = KvQuant::none) {
  KvSpec spec = KvSpec::parse(kv);
  spec.group = std::min(spec.group, kDim);
  spec.k_quant = k_quant, spec.v_quant = v_quant;
  spec.validate();
  auto [kf, vf] = make_history_formats(spec, KvShape{1, kKvHeads, kDim}, nullptr);
  LayerKvFormat f{spec, kf.empty() ? nullptr : &kf[0], vf.empty() ? nullptr : &vf[0], rot, 0};
  const CachedAttention a = cached_attention(kShape, x, n, n_q, f);
  return {relative_l2_error(a.out, exact_output(x, n, n_q)), a.bits_per_element};
}

TEST(KvError, F32CacheIsExact) {
  const LayerQkv x = random_qkv(700, 11);
  const Measured m = measure("f32", x, 700, 37);
  EXPECT_LT(m.error, 1e-5);
  EXPECT_DOUBLE_EQ(m.bits, 32.0);
}

TEST(KvError, RotationIsUndoneExactly) {
  // The Hadamard rotator with an f32 cache: q·R, k·R, v·R, then the output ·Rᵀ.
  const LayerQkv x = random_qkv(300, 12);
  const KvRotator h = KvRotator::hadamard(1, kDim);
  EXPECT_LT(measure("f32", x, 300, 20, &h).error, 1e-5);
}

TEST(KvError, ErrorFollowsBits) {
  const int64_t n = 1200, n_q = 64;
  const LayerQkv x = random_qkv(n, 13);
  const Measured bf16 = measure("bf16", x, n, n_q), i8 = measure("int8", x, n, n_q), i4 = measure("int4", x, n, n_q),
                 i2 = measure("int2", x, n, n_q);
  std::printf("errors: bf16 %.2e int8 %.2e int4 %.2e int2 %.2e\n", bf16.error, i8.error, i4.error, i2.error);
  EXPECT_GT(bf16.error, 0.0);
  EXPECT_LT(bf16.error, 5e-3);
  EXPECT_LT(bf16.error, i8.error);
  EXPECT_LT(i8.error, i4.error);
  EXPECT_LT(i4.error, i2.error);
  EXPECT_LT(i8.error, 2e-2);
  EXPECT_GT(i2.error, 0.05);
  EXPECT_GT(bf16.bits, i8.bits);
  EXPECT_GT(i4.bits, i2.bits);
}

TEST(KvError, WiderKeysOrValuesSitBetweenTheirTypes) {
  // --kv-k-type / --kv-v-type int4 over int2: one side's codes widen, so the error and the
  // bits fall between uniform int2 and uniform int4.
  const int64_t n = 1200, n_q = 64;
  const LayerQkv x = random_qkv(n, 15);
  const Measured i2 = measure("int2", x, n, n_q), i4 = measure("int4", x, n, n_q);
  const Measured k4 = measure("int2", x, n, n_q, nullptr, KvQuant::int4);
  const Measured v4 = measure("int2", x, n, n_q, nullptr, KvQuant::none, KvQuant::int4);
  std::printf("errors: int2 %.3f k4v2 %.3f k2v4 %.3f int4 %.3f\n", i2.error, k4.error, v4.error, i4.error);
  for (const Measured& m : {k4, v4}) {
    EXPECT_LT(m.error, i2.error);
    EXPECT_GT(m.error, i4.error);
    EXPECT_GT(m.bits, i2.bits);
    EXPECT_LT(m.bits, i4.bits);
  }
  EXPECT_DOUBLE_EQ(k4.bits, v4.bits);  // the same two formats, swapped
}

TEST(KvError, WiderKeyFormatsPerLayer) {
  KvSpec spec = KvSpec::parse("int2-oscar");
  spec.k_quant = KvQuant::int4;
  spec.validate();
  EXPECT_EQ(spec.name(), "int2-oscar+k-int4");
  const auto [kf, vf] = make_history_formats(spec, KvShape{3, kKvHeads, kDim}, nullptr);
  ASSERT_EQ(kf.size(), 3u);
  for (size_t l = 0; l < 3; ++l) {
    EXPECT_EQ(kf[l].quant, KvQuant::int4);
    EXPECT_EQ(kf[l].clip, 0.0f);  // the clips are fitted for 2-bit codes
    EXPECT_EQ(vf[l].quant, KvQuant::int2);
    EXPECT_EQ(vf[l].clip, 0.92f);
  }
  KvSpec kivi = KvSpec::parse("kivi2");
  kivi.v_quant = KvQuant::int4;
  EXPECT_THROW(kivi.validate(), Error);
  KvSpec plain = KvSpec::parse("bf16");
  plain.k_quant = KvQuant::int8;
  EXPECT_THROW(plain.validate(), Error);
  KvSpec two = KvSpec::parse("int4");
  two.k_quant = KvQuant::int2;  // only wider codes
  EXPECT_THROW(two.validate(), Error);
}

TEST(KvError, NoHistoryMeansNoQuantizationError) {
  // 64 sink + 256 recent hold all 300 tokens: int2 stores nothing in INT2.
  const LayerQkv x = random_qkv(300, 14);
  EXPECT_DOUBLE_EQ(measure("int2", x, 300, 50).error, measure("bf16", x, 300, 50).error);
}

TEST(KvError, RelativeL2) {
  const std::vector<float> ref{3, 4}, a{3, 5}, z{0, 0};
  EXPECT_DOUBLE_EQ(relative_l2_error(a, ref), 0.2);
  EXPECT_DOUBLE_EQ(relative_l2_error(z, z), 0.0);
  EXPECT_THROW(relative_l2_error(std::vector<float>{1}, ref), Error);
}

}  // namespace
}  // namespace oscar

namespace oscar {
namespace {

TEST(KvStats, RowStatistics) {
  // Two rows of d = 4: (1, 1, 1, 1) and (4, 0, 0, 0): rms over all = sqrt(20/8),
  // max/rms per row 1 and 4/2 = 2; channel RMS² = (17, 1, 1, 1)/2 → outlier sqrt(17).
  const std::vector<float> rows{1, 1, 1, 1, 4, 0, 0, 0};
  const std::vector<float> bias{1, 0, 0, 1};
  const RowStats s = row_stats(rows.data(), 2, 4, 4, bias);
  EXPECT_NEAR(s.rms, std::sqrt(20.0 / 8), 1e-12);
  EXPECT_NEAR(s.max_over_rms, 1.5, 1e-12);
  EXPECT_NEAR(s.channel_outlier, std::sqrt(17.0), 1e-12);
  EXPECT_NEAR(s.bias_share, 2.0 / 10.0, 1e-12);
  // A Hadamard rotation spreads the outlier row evenly: (4,0,0,0)·H/2 = (2,2,2,2).
  const std::vector<float> H{0.5f, 0.5f, 0.5f, 0.5f, 0.5f, -0.5f, 0.5f, -0.5f,
                             0.5f, 0.5f, -0.5f, -0.5f, 0.5f, -0.5f, -0.5f, 0.5f};
  const RowStats r = row_stats(rows.data(), 2, 4, 4, {}, H.data());
  EXPECT_NEAR(r.rms, s.rms, 1e-6);
  EXPECT_NEAR(r.max_over_rms, (2.0 + 1.0) / 2, 1e-6);  // (1,1,1,1)·H = (2,0,0,0): ratio 2
}

}  // namespace
}  // namespace oscar
