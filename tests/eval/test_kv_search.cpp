// The calibration searches over measured per-layer error (KvErrorProbe), on a tiny random
// Qwen2-style model (QKV bias) with random orthogonal rotations: the probe reproduces
// exact attention for an f32 cache and orders the types by bits; the clip search never
// makes a layer worse and reports errors the probe reproduces; the budget choice stays
// within its budget and spends it on the layers with the largest errors.
#include <gtest/gtest.h>

#include "../mixed_cache_util.h"
#include "../tiny_model.h"
#include "oscar/core/error.h"
#include "oscar/eval/kv_search.h"

namespace oscar {
namespace {

constexpr int kLayers = 3, kDim = 32;
constexpr int64_t kTokens = 300, kQueries = 40;

struct Fixture {
  Transformer model{test::tiny_model(/*qwen2_bias=*/true, 21, kLayers, kDim)};
  QkvRecorder rec{kLayers, AttentionShape{4, 2, kDim}};
  RotationSet rs = test::random_rotation_set(kLayers, kDim, 100, 200);
  // text: which of two token patterns the model reads (two "domains" for the worst-case search).
  explicit Fixture(int text = 0) {
    model.set_observer(&rec);
    KvCache cache = model.make_cache(kTokens);
    const SeqId seq = cache.add_sequence();
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < kTokens; ++i)
      ids.push_back(text == 0 ? int32_t((i * 7 + i / 3) % 50) : int32_t((i * i + 11 * i) % 37 + 13));
    std::vector<float> logits;
    model.forward(cache, seq, ids, LogitsFor::last, logits);
    model.set_observer(nullptr);
  }
};

KvSpec spec(const char* kv) {
  KvSpec s = KvSpec::parse(kv);
  s.sink = 8;
  s.recent = 16;
  s.group = kDim;
  s.validate();
  return s;
}

double mean_error(const std::vector<KvErrorProbe::LayerResult>& r) {
  double s = 0;
  for (const auto& x : r) s += x.error;
  return s / double(r.size());
}

TEST(KvSearch, ProbeIsExactForF32AndOrdersTypesByBits) {
  Fixture f;
  const KvErrorProbe probe(f.model, f.rec, kTokens, kQueries);
  for (const auto& r : probe.all_layers(spec("f32"), nullptr)) {
    EXPECT_LT(r.error, 1e-5);
    EXPECT_DOUBLE_EQ(r.history_bits, 32.0);
  }
  const double e8 = mean_error(probe.all_layers(spec("int8"), nullptr));
  const double e4 = mean_error(probe.all_layers(spec("int4"), nullptr));
  const double e2 = mean_error(probe.all_layers(spec("int2-oscar"), &f.rs));
  EXPECT_LT(e8, e4);
  EXPECT_LT(e4, e2);
  // History bits: codes plus an fp16 scale and zero per group of 32.
  EXPECT_DOUBLE_EQ(probe.layer(spec("int2-oscar"), &f.rs, 0).history_bits, 2.0 + 32.0 / kDim);
  EXPECT_DOUBLE_EQ(probe.layer(spec("int8"), nullptr, 0).history_bits, 8.0 + 32.0 / kDim);
  EXPECT_THROW(probe.layer(spec("int2-oscar"), nullptr, 0), Error);  // calibrated without rotations
}

TEST(KvSearch, KeyBiasSplitIsMeasured) {
  // The model has a K bias; splitting it off must change what the probe measures for int2.
  Fixture f;
  const KvErrorProbe probe(f.model, f.rec, kTokens, kQueries);
  KvSpec with = spec("int2"), without = spec("int2");
  with.k_bias_split = true;
  EXPECT_NE(probe.layer(with, nullptr, 1).error, probe.layer(without, nullptr, 1).error);
}

TEST(KvSearch, KeyMeanIsMeasured) {
  // A calibrated key mean under --k-mean changes what the probe quantizes; without the
  // flag the probe sees the set as if it had none.
  Fixture f;
  const KvErrorProbe probe(f.model, f.rec, kTokens, kQueries);
  RotationSet meaned = f.rs;
  for (LayerRotation& l : meaned.layers) l.k_mean = test::random_vector(2 * kDim, 70 + uint64_t(l.layer), -3.0f, 3.0f);
  KvSpec on = spec("int2-oscar"), off = spec("int2-oscar");
  off.k_mean = false;
  EXPECT_NE(probe.layer(on, &meaned, 1).error, probe.layer(on, &f.rs, 1).error);
  EXPECT_EQ(probe.layer(off, &meaned, 1).error, probe.layer(on, &f.rs, 1).error);
}

TEST(KvSearch, KeyScaleIsMeasuredAndExactInF32) {
  // Under --k-scale the probe quantizes (k − m) ⊘ s against queries q ⊙ s, as the model does;
  // with an f32 cache that changes nothing (one layer of cached_attention, ≤ 1e-5).
  Fixture f;
  const KvErrorProbe probe(f.model, f.rec, kTokens, kQueries);
  RotationSet scaled = f.rs;
  for (LayerRotation& l : scaled.layers) l.k_scale = test::random_vector(2 * kDim, 80 + uint64_t(l.layer), 0.25f, 4.0f);
  KvSpec on = spec("int2-oscar"), off = spec("int2-oscar");
  on.k_scale = true;
  EXPECT_NE(probe.layer(on, &scaled, 1).error, probe.layer(off, &scaled, 1).error);
  EXPECT_EQ(probe.layer(off, &scaled, 1).error, probe.layer(off, &f.rs, 1).error);

  const ModelConfig& c = f.model.config();
  const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim};
  const KvSpec f32 = KvSpec::parse("f32");
  const std::vector<float> mean = test::random_vector(2 * kDim, 81, -3.0f, 3.0f);
  LayerKvFormat plain{f32, nullptr, nullptr, nullptr, 1}, with = plain;
  with.k_mean = mean.data();
  with.k_scale = scaled.layers[1].k_scale.data();
  const std::vector<float> a = cached_attention(shape, f.rec.layer(1), kTokens, kQueries, plain).out;
  const std::vector<float> b = cached_attention(shape, f.rec.layer(1), kTokens, kQueries, with).out;
  EXPECT_LE(test::max_rel_error(b.data(), a.data(), a.size()), 1e-5);
}

TEST(KvSearch, ClipSearchNeverHurtsAndIsReproducible) {
  Fixture f;
  const KvErrorProbe probe(f.model, f.rec, kTokens, kQueries);
  const KvSpec s = spec("int2-oscar");
  RotationSet rs = f.rs;
  const std::vector<float> grid = default_clip_grid();
  const std::vector<LayerClipChoice> ch = search_clip_ratios(probe, s, rs, grid);
  ASSERT_EQ(ch.size(), size_t(kLayers));
  for (int l = 0; l < kLayers; ++l) {
    EXPECT_LE(ch[size_t(l)].error_after, ch[size_t(l)].error_before);
    EXPECT_DOUBLE_EQ(ch[size_t(l)].error_before, probe.layer(s, &f.rs, l).error);
    EXPECT_DOUBLE_EQ(ch[size_t(l)].error_after, probe.layer(s, &rs, l).error);  // the written clips give it
    EXPECT_EQ(rs.layers[size_t(l)].k_clip, ch[size_t(l)].k_clip);
    for (float c : {ch[size_t(l)].k_clip, ch[size_t(l)].v_clip})
      EXPECT_TRUE(std::find(grid.begin(), grid.end(), c) != grid.end() || c == 0.96f || c == 0.92f) << c;
  }
  EXPECT_THROW(search_clip_ratios(probe, spec("int4"), rs, grid), Error);  // not a calibrated type
}

TEST(KvSearch, WorstCaseClipSearchMinimizesTheLargestProbeError) {
  // Two probes on different token streams: the chosen clips are scored by the larger of the
  // two errors, which the probes reproduce; with one probe given twice the search is the
  // single-probe search.
  Fixture a(0), b(1);
  const KvErrorProbe pa(a.model, a.rec, kTokens, kQueries), pb(b.model, b.rec, kTokens, kQueries);
  const KvSpec s = spec("int2-oscar");
  const std::vector<float> grid = default_clip_grid();
  const KvErrorProbe* const both[] = {&pa, &pb};
  RotationSet rs = a.rs;
  const std::vector<LayerClipChoice> ch = search_clip_ratios(both, s, rs, grid);
  ASSERT_EQ(ch.size(), size_t(kLayers));
  bool differs = false;
  for (int l = 0; l < kLayers; ++l) {
    const LayerClipChoice& c = ch[size_t(l)];
    const double ea = pa.layer(s, &rs, l).error, eb = pb.layer(s, &rs, l).error;
    ASSERT_EQ(c.probe_errors.size(), 2u);
    EXPECT_DOUBLE_EQ(c.probe_errors[0], ea);
    EXPECT_DOUBLE_EQ(c.probe_errors[1], eb);
    EXPECT_DOUBLE_EQ(c.error_after, std::max(ea, eb));
    EXPECT_DOUBLE_EQ(c.error_before, std::max(pa.layer(s, &a.rs, l).error, pb.layer(s, &a.rs, l).error));
    EXPECT_LE(c.error_after, c.error_before);
    differs |= ea != eb;
  }
  EXPECT_TRUE(differs);  // the two texts are different probes

  RotationSet one = a.rs, twice = a.rs;
  const std::vector<LayerClipChoice> c1 = search_clip_ratios(pa, s, one, grid);
  const KvErrorProbe* const same[] = {&pa, &pa};
  const std::vector<LayerClipChoice> c2 = search_clip_ratios(same, s, twice, grid);
  for (int l = 0; l < kLayers; ++l) {
    EXPECT_EQ(c1[size_t(l)].k_clip, c2[size_t(l)].k_clip);
    EXPECT_EQ(c1[size_t(l)].v_clip, c2[size_t(l)].v_clip);
    EXPECT_DOUBLE_EQ(c1[size_t(l)].error_after, c2[size_t(l)].error_after);
  }
  EXPECT_THROW(search_clip_ratios(std::span<const KvErrorProbe* const>(), s, rs, grid), Error);
}

TEST(KvSearch, KeyMeanSearchDropsAHarmfulMeanAndReportsWhatTheProbeMeasures) {
  // Layer 0 gets a large random "mean" (a shift that widens every token's quantization range:
  // it must go), layer 1 the keys' own mean over the probe, layer 2 none.
  Fixture f;
  const KvErrorProbe probe(f.model, f.rec, kTokens, kQueries);
  const KvErrorProbe* const one[] = {&probe};
  const KvSpec s = spec("int2-oscar");  // key centring on by default for ours
  ASSERT_TRUE(s.k_mean);
  RotationSet rs = f.rs;
  rs.layers[0].k_mean = test::random_vector(2 * kDim, 90, -40.0f, 40.0f);
  std::vector<float> own(2 * kDim, 0.0f);
  const std::vector<float>& k1 = f.rec.layer(1).k;
  for (size_t i = 0; i < size_t(kTokens) * 2 * kDim; ++i) own[i % own.size()] += k1[i] / float(kTokens);
  rs.layers[1].k_mean = own;
  rs.layers[2].k_mean.clear();
  const RotationSet before = rs;
  const std::vector<LayerKeyMeanChoice> ch = choose_key_means(one, s, rs);
  ASSERT_EQ(ch.size(), size_t(kLayers));
  EXPECT_FALSE(ch[0].kept);
  EXPECT_TRUE(rs.layers[0].k_mean.empty());
  EXPECT_GT(ch[0].error_with, ch[0].error_without);
  for (int l = 0; l < 2; ++l) {
    EXPECT_DOUBLE_EQ(ch[size_t(l)].error_with, probe.layer(s, &before, l).error);
    EXPECT_EQ(ch[size_t(l)].kept, ch[size_t(l)].error_with <= ch[size_t(l)].error_without);
    EXPECT_EQ(rs.layers[size_t(l)].k_mean.empty(), !ch[size_t(l)].kept);
  }
  EXPECT_DOUBLE_EQ(ch[0].error_without, probe.layer(s, &rs, 0).error);
  EXPECT_FALSE(ch[2].kept);
  EXPECT_DOUBLE_EQ(ch[2].error_with, ch[2].error_without);
  KvSpec off = s;
  off.k_mean = false;
  EXPECT_THROW(choose_key_means(one, off, rs), Error);
}

TEST(KvSearch, BudgetChoiceStaysWithinBudgetAndUpgradesWorstLayers) {
  Fixture f;
  const KvErrorProbe probe(f.model, f.rec, kTokens, kQueries);
  const KvSpec base = spec("int2-oscar");
  const double b2 = 2.0 + 32.0 / kDim, b4 = 4.0 + 32.0 / kDim, b8 = 8.0 + 32.0 / kDim;

  const LayerTypeChoice tight = choose_kv_layer_types(probe, base, f.rs, {"int4", "int8"}, b2);
  EXPECT_EQ(tight.kv_layers, "");
  EXPECT_DOUBLE_EQ(tight.mean_history_bits, b2);

  const LayerTypeChoice all = choose_kv_layer_types(probe, base, f.rs, {"int4", "int8"}, 16.0);
  EXPECT_EQ(all.kv_layers, "0-2:int8");

  // Room for exactly one int4 layer: it goes to the layer with the largest int2 error
  // (the errors are far apart on random weights; the squared-error gain decides).
  const LayerTypeChoice one = choose_kv_layer_types(probe, base, f.rs, {"int4"}, b2 + (b4 - b2) / kLayers);
  int worst = 0;
  double best_gain = -1;
  for (int l = 0; l < kLayers; ++l) {
    const auto& c = one.candidates[size_t(l)];
    const double gain = c[0].error * c[0].error - c[1].error * c[1].error;
    EXPECT_DOUBLE_EQ(c[0].error, probe.layer(base, &f.rs, l).error);
    if (gain > best_gain) best_gain = gain, worst = l;
  }
  EXPECT_EQ(one.kv_layers, std::to_string(worst) + ":int4");
  EXPECT_LE(one.mean_history_bits, b2 + (b4 - b2) / kLayers + 1e-9);
  EXPECT_GT(b8, b4);

  EXPECT_THROW(choose_kv_layer_types(probe, base, f.rs, {"int4"}, 2.0), Error);      // below the base
  EXPECT_THROW(choose_kv_layer_types(probe, base, f.rs, {"int3"}, 8.0), Error);      // unknown type
  EXPECT_THROW(choose_kv_layer_types(probe, base, f.rs, {"kivi2"}, 8.0), Error);     // cannot be mixed
}

}  // namespace
}  // namespace oscar
