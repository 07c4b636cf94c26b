// Per-channel K transforms (issue 6's centring/scaling candidate): the transform leaves f32
// attention unchanged (the pre-RoPE centre added back per score, the post-RoPE mean left
// to softmax, the scale moved onto q), the fit recovers planted centres and gives the
// Cauchy–Schwarz scale, and the comparison's first row is the shipped method's own error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../mixed_cache_util.h"
#include "../tiny_model.h"
#include "oscar/core/error.h"
#include "oscar/eval/k_channel.h"
#include "oscar/eval/kv_search.h"

namespace oscar {
namespace {

constexpr int kLayers = 2, kDim = 32;
constexpr int64_t kTokens = 240, kQueries = 30;
const AttentionShape kShape{4, 2, kDim};

struct Recorded {
  Transformer model{test::tiny_model(/*qwen2_bias=*/true, 31, kLayers, kDim)};
  QkvRecorder calib{kLayers, kShape}, eval{kLayers, kShape};
  Recorded() {
    record(calib, 3);
    record(eval, 11);
  }
  void record(QkvRecorder& rec, int salt) {
    model.set_observer(&rec);
    KvCache cache = model.make_cache(kTokens);
    const SeqId seq = cache.add_sequence();
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < kTokens; ++i) ids.push_back(int32_t((i * salt + i / 5) % 50));
    std::vector<float> logits;
    model.forward(cache, seq, ids, LogitsFor::last, logits);
    model.set_observer(nullptr);
  }
  std::span<const float> bias(int l) const { return model.weights().layers[size_t(l)].bk; }
};

std::vector<float> f32_attention(const LayerQkv& x, const float* split_rows) {
  LayerKvFormat f{KvSpec::parse("f32"), nullptr, nullptr, nullptr, 0};
  f.k_bias_rows = split_rows;
  return cached_attention(kShape, x, kTokens, kQueries, f).out;
}

TEST(KChannel, TransformKeepsF32AttentionExact) {
  Recorded r;
  const RopeFreqs rope = rope_freqs(r.model.config());
  for (int l = 0; l < kLayers; ++l) {
    const std::vector<float> ref = f32_attention(r.calib.layer(l), nullptr);
    for (const KChannelVariant v : {KChannelVariant{true, true, true, true}, KChannelVariant{false, true, true, false},
                                    KChannelVariant{true, false, false, false}}) {
      const KChannelTransform t = fit_k_channel_transform(v, r.calib.layer(l), kTokens, kShape, rope, r.bias(l));
      const TransformedQkv x = apply_k_channel_transform(t, r.calib.layer(l), kTokens, kShape, rope);
      ASSERT_FALSE(x.split_rows.empty());
      EXPECT_LT(relative_l2_error(f32_attention(x.qkv, x.split_rows.data()), ref), 2e-5) << v.name();
      // The pre-RoPE centre's term depends on the position: stored without its add-back,
      // the outputs must move; likewise a scale on k without its factor on q.
      LayerQkv dropped = x.qkv;
      for (size_t i = 0; i < x.split_rows.size(); ++i) dropped.k[i] -= x.split_rows[i];
      EXPECT_GT(relative_l2_error(f32_attention(dropped, nullptr), ref), 1e-2) << v.name();
      if (v.scale) {
        LayerQkv unscaled_q = x.qkv;
        unscaled_q.q = r.calib.layer(l).q;
        EXPECT_GT(relative_l2_error(f32_attention(unscaled_q, x.split_rows.data()), ref), 1e-2) << v.name();
      }
    }
    // A post-RoPE mean alone needs nothing added back.
    const KChannelTransform m = fit_k_channel_transform({false, true, false, false}, r.calib.layer(l), kTokens, kShape, rope, {});
    ASSERT_FALSE(m.mean.empty());
    const TransformedQkv xm = apply_k_channel_transform(m, r.calib.layer(l), kTokens, kShape, rope);
    EXPECT_TRUE(xm.split_rows.empty());
    EXPECT_LT(relative_l2_error(f32_attention(xm.qkv, nullptr), ref), 2e-5);
  }
}

TEST(KChannel, FitRecoversPlantedCentres) {
  // k_p = RoPE(μ + ε_p, p) + m with ε ~ N(0, 0.1²): the pre-RoPE centre is μ (m rotates
  // away over positions only approximately, so it is planted on its own below).
  ModelConfig c = test::tiny_model(false, 1, 1, kDim).config;
  const RopeFreqs rope = rope_freqs(c);
  const int64_t n = 4000, kvd = 2 * kDim;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  const std::vector<float> mu = test::random_vector(size_t(kvd), 5, -2.0f, 2.0f);
  const std::vector<float> m = test::random_vector(size_t(kvd), 6, -3.0f, 3.0f);
  LayerQkv pre, post;
  pre.q = post.q = test::random_vector(size_t(n * 4 * kDim), 8, -1.0f, 1.0f);
  for (int64_t p = 0; p < n; ++p) {
    std::vector<float> row(static_cast<size_t>(kvd));
    for (int64_t i = 0; i < kvd; ++i) row[size_t(i)] = mu[size_t(i)] + noise(rng);
    rope_apply(rope, row.data(), 2, kDim, p);
    pre.k.insert(pre.k.end(), row.begin(), row.end());
    for (int64_t i = 0; i < kvd; ++i) post.k.push_back(m[size_t(i)] + noise(rng));
  }
  pre.v = pre.k, post.v = post.k;
  const KChannelTransform tc = fit_k_channel_transform({true, false, false, false}, pre, n, kShape, rope, {});
  const KChannelTransform tm = fit_k_channel_transform({false, true, false, false}, post, n, kShape, rope, {});
  for (int64_t i = 0; i < kvd; ++i) {
    EXPECT_NEAR(tc.center[size_t(i)], mu[size_t(i)], 0.01f) << i;  // 5σ of a 4000-row mean is 0.008
    EXPECT_NEAR(tm.mean[size_t(i)], m[size_t(i)], 0.01f) << i;
  }
  EXPECT_TRUE(tc.mean.empty() && tm.center.empty() && tc.scale.empty() && tc.k_rotation.empty());
}

TEST(KChannel, ScaleIsTheFourthRootAndPredictsItsGain) {
  // Channel c of every query row is ±a_c and of every key row ±b_c: Q_c = a_c², K_c = b_c².
  ModelConfig cfg = test::tiny_model(false, 1, 1, kDim).config;
  const RopeFreqs rope = rope_freqs(cfg);
  const int64_t n = 64, kvd = 2 * kDim;
  std::vector<double> a(kDim), b(kDim);
  for (int c = 0; c < kDim; ++c) a[size_t(c)] = 0.5 + c, b[size_t(c)] = 40.0 / (1.0 + c);  // anti-correlated
  LayerQkv x;
  for (int64_t p = 0; p < n; ++p) {
    const float sign = p % 2 ? 1.0f : -1.0f;
    for (int h = 0; h < 4; ++h)
      for (int c = 0; c < kDim; ++c) x.q.push_back(sign * float(a[size_t(c)]));
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < kDim; ++c) x.k.push_back(sign * float(b[size_t(c)]));
  }
  x.v = x.k;
  const KChannelTransform t = fit_k_channel_transform({false, false, true, true}, x, n, kShape, rope, {});
  ASSERT_EQ(t.scale.size(), size_t(kvd));
  double cross = 0, sq = 0, sk = 0, log_sum = 0;
  for (int c = 0; c < kDim; ++c) {
    cross += a[size_t(c)] * b[size_t(c)], sq += a[size_t(c)] * a[size_t(c)], sk += b[size_t(c)] * b[size_t(c)];
    log_sum += 0.5 * std::log(b[size_t(c)] / a[size_t(c)]);
  }
  EXPECT_NEAR(t.predicted_gain, cross * cross / (sq * sk), 1e-6);
  EXPECT_LT(t.predicted_gain, 0.5);
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < kDim; ++c)
      EXPECT_NEAR(t.scale[size_t(h * kDim + c)], std::exp(0.5 * std::log(b[size_t(c)] / a[size_t(c)]) - log_sum / kDim), 1e-4);
  EXPECT_EQ(t.k_rotation.size(), size_t(kDim * kDim));

  // Proportional profiles: nothing to gain, and the scale is flat.
  for (int c = 0; c < kDim; ++c) b[size_t(c)] = 3.0 * a[size_t(c)];
  for (size_t i = 0; i < x.k.size(); ++i) x.k[i] = 3.0f * x.q[i % size_t(kDim) + (i / size_t(kvd)) * size_t(4 * kDim)];
  const KChannelTransform flat = fit_k_channel_transform({false, false, true, true}, x, n, kShape, rope, {});
  EXPECT_NEAR(flat.predicted_gain, 1.0, 1e-6);
  for (float s : flat.scale) EXPECT_NEAR(s, 1.0f, 1e-5f);
}

TEST(KChannel, ComparisonStartsFromTheShippedMethod) {
  Recorded r;
  const RotationSet rs = test::random_rotation_set(kLayers, kDim, 300, 400);
  KvSpec spec = KvSpec::parse("int2-oscar");
  spec.sink = 8, spec.recent = 16, spec.group = kDim;
  spec.validate();
  ASSERT_TRUE(spec.k_bias_split);
  const std::vector<float> grid = {1.0f, 0.9f, 0.8f};
  const std::vector<KChannelVariant> variants = {{true, false, false, false}, {false, true, true, true}};
  const std::vector<KChannelResult> res =
      compare_k_channel_variants(r.model, r.calib, r.eval, kTokens, kQueries, spec, rs, variants, grid);
  ASSERT_EQ(res.size(), 3u);
  const KvErrorProbe probe(r.model, r.eval, kTokens, kQueries);
  for (int l = 0; l < kLayers; ++l) {
    EXPECT_NEAR(res[0].layer_error[size_t(l)], probe.layer(spec, &rs, l).error, 1e-9);
    EXPECT_EQ(res[0].k_clip[size_t(l)], 0.96f);
    for (size_t i = 1; i < res.size(); ++i) {
      const float c = res[i].k_clip[size_t(l)];
      EXPECT_TRUE(c == 0.96f || c == 1.0f || c == 0.9f || c == 0.8f) << c;
      EXPECT_TRUE(std::isfinite(res[i].layer_error[size_t(l)]) && res[i].layer_error[size_t(l)] > 0);
    }
  }
  EXPECT_EQ(res[1].variant, "int2-oscar+k-center");
  EXPECT_EQ(res[2].variant, "int2-oscar+k-mean+k-scale");
  EXPECT_THROW(compare_k_channel_variants(r.model, r.calib, r.eval, kTokens, kQueries, KvSpec::parse("int4"), rs,
                                          variants, grid),
               Error);
}

}  // namespace
}  // namespace oscar
