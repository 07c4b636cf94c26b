// R_V absorbed into W_v / W_o at load must give the same logits as rotating v and
// un-rotating the attention output at run time, and both must equal the unrotated
// model: with an f32 KV cache and no quantization a calibrated rotation is exact
// (scores keep q·kᵀ, the output gets R_V·R_Vᵀ = I). A tiny random model, built in code.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../mixed_cache_util.h"
#include "../test_util.h"
#include "../tiny_model.h"
#include "oscar/core/error.h"
#include "oscar/model/transformer.h"

namespace oscar {
namespace {

using test::tiny_model;

// Random orthogonal K and V rotations per layer; `identity_k1`: layer 1 keeps an empty
// (identity) K rotation, which the set allows.
RotationSet random_rotations(int n_layers, int d, bool identity_k1, uint64_t seed) {
  RotationSet rs;
  rs.head_dim = d;
  rs.group_size = d;
  for (int l = 0; l < n_layers; ++l) {
    LayerRotation lr;
    lr.layer = l;
    if (!(identity_k1 && l == 1)) lr.k_rotation = test::random_orthogonal(d, seed + uint64_t(2 * l));
    lr.v_rotation = test::random_orthogonal(d, seed + uint64_t(2 * l + 1));
    rs.layers.push_back(std::move(lr));
  }
  rs.validate();
  return rs;
}

// Logits of a 21-token prefill (every position) followed by 6 decode steps.
std::vector<float> run_logits(Transformer& m) {
  const std::vector<int32_t> prompt = {1, 7, 42, 3, 3, 19, 0, 49, 25, 8, 13, 31, 2, 44, 17, 6, 9, 38, 21, 11, 5};
  KvCache cache = m.make_cache(64);
  const SeqId s = cache.add_sequence();
  std::vector<float> all, logits;
  m.forward(cache, s, prompt, LogitsFor::all, logits);
  all.insert(all.end(), logits.begin(), logits.end());
  for (int32_t tok : {4, 40, 12, 12, 30, 1}) {
    const int32_t one[1] = {tok};
    m.forward(cache, s, one, LogitsFor::last, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

KvSpec f32_spec(KvRotation rot) {
  KvSpec spec;
  spec.mode = rot == KvRotation::calibrated ? "f32-calibrated" : "f32";
  spec.dtype = KvDtype::f32;
  spec.quant = KvQuant::none;
  spec.rotation = rot;
  return spec;
}

TEST(RotationAbsorb, AbsorbedEqualsUnabsorbedEqualsUnrotated) {
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "qwen2 (qkv bias)" : "llama");
    const RotationSet rs = random_rotations(2, 16, bias, 77);

    Transformer plain(tiny_model(bias, 5));
    plain.configure_kv(f32_spec(KvRotation::none));
    const std::vector<float> ref = run_logits(plain);

    Transformer absorbed(tiny_model(bias, 5));
    absorbed.configure_kv(f32_spec(KvRotation::calibrated), &rs, /*absorb_v=*/true);
    const std::vector<float> got_abs = run_logits(absorbed);

    Transformer runtime(tiny_model(bias, 5));
    runtime.configure_kv(f32_spec(KvRotation::calibrated), &rs, /*absorb_v=*/false);
    const std::vector<float> got_rt = run_logits(runtime);

    ASSERT_EQ(got_abs.size(), ref.size());
    ASSERT_EQ(got_rt.size(), ref.size());
    // ≤ 1e-4 relative: max |Δ| over all logits against the largest logit.
    EXPECT_LE(test::max_rel_error(got_abs.data(), got_rt.data(), ref.size()), 1e-4) << "absorbed vs run-time R_V";
    EXPECT_LE(test::max_rel_error(got_abs.data(), ref.data(), ref.size()), 1e-4) << "absorbed vs unrotated";
    EXPECT_LE(test::max_rel_error(got_rt.data(), ref.data(), ref.size()), 1e-4) << "run-time vs unrotated";
    // Absorption really changed the weights (else the comparison above proves nothing).
    const std::vector<float> wv0 = plain.weights().layers[0].wv.to_f32();
    const std::vector<float> wv1 = absorbed.weights().layers[0].wv.to_f32();
    EXPECT_GT(test::max_rel_error(wv1.data(), wv0.data(), wv0.size()), 0.1);
    EXPECT_EQ(runtime.weights().layers[0].wv.to_f32(), wv0);
  }
}

TEST(RotationAbsorb, ReconfiguringIsExactUnlessRvWasAbsorbed) {
  // Calibration runs one model with BF16 KV, then int2-oscar (R_V at run time), then BF16
  // again (--k-mean-check): the last run must equal the first bit for bit. After absorption
  // the weights carry R_V, so configuring again is refused.
  const RotationSet rs = random_rotations(2, 16, false, 78);
  Transformer t(tiny_model(true, 6));
  t.configure_kv(f32_spec(KvRotation::none));
  const std::vector<float> first = run_logits(t);
  KvSpec q = KvSpec::parse("int2-oscar");
  q.group = 16, q.sink = 2, q.recent = 4;
  q.validate();
  t.configure_kv(q, &rs, /*absorb_v=*/false);
  const std::vector<float> quantized = run_logits(t);
  t.configure_kv(f32_spec(KvRotation::none));
  EXPECT_EQ(run_logits(t), first);
  EXPECT_GT(test::max_rel_error(quantized.data(), first.data(), first.size()), 1e-3);  // the int2 run differed

  Transformer a(tiny_model(true, 6));
  a.configure_kv(f32_spec(KvRotation::calibrated), &rs, /*absorb_v=*/true);
  EXPECT_THROW(a.configure_kv(f32_spec(KvRotation::none)), Error);
}

// --kv-layers with OSCAR on some layers only: R_V is absorbed into exactly those layers'
// W_v / W_o (the others keep their weights), and absorbed equals run-time rotation
// (≤ 1e-4, as above). Layer 0 is int8 without rotation, layer 1 int2-oscar.
TEST(RotationAbsorb, PerLayerAbsorbsOnlyOscarLayers) {
  const RotationSet rs = random_rotations(2, 16, false, 91);
  KvSpec spec = KvSpec::parse("int2-oscar");
  spec.layer_types = parse_kv_layers("0:int8", 2);
  spec.sink = 2;
  spec.recent = 4;
  spec.group = 16;
  Transformer plain(tiny_model(false, 5));
  Transformer absorbed(tiny_model(false, 5)), runtime(tiny_model(false, 5));
  absorbed.configure_kv(spec, &rs, /*absorb_v=*/true);
  runtime.configure_kv(spec, &rs, /*absorb_v=*/false);
  EXPECT_EQ(absorbed.weights().layers[0].wv.to_f32(), plain.weights().layers[0].wv.to_f32());
  EXPECT_EQ(absorbed.weights().layers[0].wo.to_f32(), plain.weights().layers[0].wo.to_f32());
  const std::vector<float> wv0 = plain.weights().layers[1].wv.to_f32();
  EXPECT_GT(test::max_rel_error(absorbed.weights().layers[1].wv.to_f32().data(), wv0.data(), wv0.size()), 0.1);
  const std::vector<float> a = run_logits(absorbed), r = run_logits(runtime);
  ASSERT_EQ(a.size(), r.size());
  EXPECT_LE(test::max_rel_error(a.data(), r.data(), a.size()), 1e-4);
  // A calibrated layer without rotations is refused, naming the mix.
  Transformer none(tiny_model(false, 5));
  try {
    none.configure_kv(spec, nullptr);
    ADD_FAILURE() << "no error without rotations";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("int2-oscar+layers(0:int8)"), std::string::npos) << e.what();
  }
  // All layers overridden away from OSCAR: no rotations needed.
  KvSpec no_oscar = spec;
  no_oscar.layer_types = parse_kv_layers("0-1:int4", 2);
  Transformer t(tiny_model(false, 5));
  EXPECT_NO_THROW(t.configure_kv(no_oscar, nullptr));
}

}  // namespace
}  // namespace oscar

namespace oscar {
namespace {

// --k-bias-split: the cache keeps k − RoPE(b_k, p) and attention adds RoPE(b_k, p) back.
// With an exact (f32) cache that changes nothing (≤ 1e-5 relative, with and without a
// calibrated rotation, through prefill and decode).
TEST(KBiasSplit, ExactCacheUnchanged) {
  const RotationSet rs = random_rotations(2, 16, false, 55);
  for (KvRotation rot : {KvRotation::none, KvRotation::calibrated}) {
    SCOPED_TRACE(rot == KvRotation::none ? "no rotation" : "calibrated rotation");
    Transformer plain(tiny_model(true, 8));
    plain.configure_kv(f32_spec(rot), rot == KvRotation::none ? nullptr : &rs);
    const std::vector<float> ref = run_logits(plain);
    KvSpec split_spec = f32_spec(rot);
    split_spec.k_bias_split = true;
    Transformer split(tiny_model(true, 8));
    split.configure_kv(split_spec, rot == KvRotation::none ? nullptr : &rs);
    const std::vector<float> got = run_logits(split);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_LE(test::max_rel_error(got.data(), ref.data(), ref.size()), 1e-5);
  }
}

// With INT2 history the split changes what is quantized, so the logits move.
// `mode` with windows of 2 + 4 tokens and one group per row: most keys are INT2 history.
KvSpec small_window_spec(const char* mode) {
  KvSpec spec = KvSpec::parse(mode);
  spec.sink = 2;
  spec.recent = 4;
  spec.group = 16;
  return spec;
}

TEST(KBiasSplit, ChangesWhatIsQuantized) {
  const KvSpec spec = small_window_spec("int2");
  KvSpec split_spec = spec;
  split_spec.k_bias_split = true;
  Transformer plain(tiny_model(true, 9)), split(tiny_model(true, 9));
  plain.configure_kv(spec);
  split.configure_kv(split_spec);
  const auto a = run_logits(plain), b = run_logits(split);
  EXPECT_GT(test::max_rel_error(b.data(), a.data(), a.size()), 1e-3);
}

}  // namespace
}  // namespace oscar

namespace oscar {
namespace {

// --k-mean: every key of a calibrated layer loses the same vector before it is cached, so
// each query's scores move by one constant that softmax cancels: with an exact cache the
// logits stay (≤ 1e-4 relative); with INT2 history what is quantized changes; a mean of
// the wrong size is refused by name.
RotationSet with_key_means(RotationSet rs, int n_kv, uint64_t seed) {
  for (LayerRotation& l : rs.layers) l.k_mean = test::random_vector(size_t(n_kv * rs.head_dim), seed++, -2.0f, 2.0f);
  rs.validate();
  return rs;
}

TEST(KMean, ExactCacheUnchanged) {
  const RotationSet plain_rs = random_rotations(2, 16, false, 61);
  const RotationSet mean_rs = with_key_means(plain_rs, 2, 90);
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "qwen2 bias, split" : "llama");
    KvSpec spec = f32_spec(KvRotation::calibrated);
    spec.k_bias_split = bias;
    spec.k_mean = true;
    Transformer plain(tiny_model(bias, 12)), meaned(tiny_model(bias, 12));
    plain.configure_kv(spec, &plain_rs);
    meaned.configure_kv(spec, &mean_rs);
    EXPECT_TRUE(plain.key_shift(0).empty());
    ASSERT_EQ(meaned.key_shift(1).size(), 32u);
    const std::vector<float> ref = run_logits(plain), got = run_logits(meaned);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_LE(test::max_rel_error(got.data(), ref.data(), ref.size()), 1e-4);
  }
}

TEST(KMean, ChangesWhatIsQuantizedAndIsCheckedAgainstTheModel) {
  const RotationSet plain_rs = random_rotations(2, 16, false, 62);
  const RotationSet mean_rs = with_key_means(plain_rs, 2, 91);
  const KvSpec spec = small_window_spec("int2-oscar");
  KvSpec off = spec;
  off.k_mean = false;
  Transformer a(tiny_model(false, 13)), b(tiny_model(false, 13)), c(tiny_model(false, 13));
  a.configure_kv(spec, &mean_rs);
  b.configure_kv(off, &mean_rs);
  c.configure_kv(spec, &plain_rs);
  EXPECT_TRUE(b.key_shift(0).empty());
  const auto la = run_logits(a), lb = run_logits(b), lc = run_logits(c);
  EXPECT_GT(test::max_rel_error(la.data(), lb.data(), lb.size()), 1e-3);
  EXPECT_EQ(lb, lc);  // --no-k-mean is the set without means

  RotationSet bad = plain_rs;
  bad.layers[1].k_mean.assign(16, 0.5f);  // one KV head's worth; the model has two
  Transformer d(tiny_model(false, 13));
  try {
    d.configure_kv(spec, &bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1 k_mean"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace oscar

namespace oscar {
namespace {

// --k-scale: keys of a calibrated layer are divided by s and its queries multiplied by it
// (before R_K, after the key mean), the mean and the bias rows divided too, so q·k is exact:
// with an f32 cache the logits stay (≤ 1e-4 relative, prefill and decode); with INT2 history
// what is quantized changes; a scale of the wrong size, and the flag on a set without
// scales, are refused by name.
RotationSet with_key_scales(RotationSet rs, int n_kv, uint64_t seed) {
  for (LayerRotation& l : rs.layers) l.k_scale = test::random_vector(size_t(n_kv * rs.head_dim), seed++, 0.2f, 4.0f);
  rs.validate();
  return rs;
}

TEST(KScale, ExactCacheUnchanged) {
  const RotationSet plain_rs = random_rotations(2, 16, false, 63);
  const RotationSet scaled_rs = with_key_scales(with_key_means(plain_rs, 2, 92), 2, 120);
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "qwen2 bias, split" : "llama");
    KvSpec spec = f32_spec(KvRotation::calibrated);
    spec.k_bias_split = bias;
    spec.k_mean = true;
    KvSpec scaled_spec = spec;
    scaled_spec.k_scale = true;
    Transformer plain(tiny_model(bias, 14)), scaled(tiny_model(bias, 14));
    plain.configure_kv(spec, &plain_rs);
    scaled.configure_kv(scaled_spec, &scaled_rs);
    EXPECT_TRUE(plain.key_scale(0).empty());
    ASSERT_EQ(scaled.key_scale(1), scaled_rs.layers[1].k_scale);
    const std::vector<float> ref = run_logits(plain), got = run_logits(scaled);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_LE(test::max_rel_error(got.data(), ref.data(), ref.size()), 1e-4);
  }
}

TEST(KScale, ChangesWhatIsQuantizedAndIsCheckedAgainstTheModel) {
  const RotationSet plain_rs = with_key_means(random_rotations(2, 16, false, 64), 2, 93);
  const RotationSet scaled_rs = with_key_scales(plain_rs, 2, 121);
  KvSpec on = small_window_spec("int2-oscar");
  on.k_scale = true;
  const KvSpec off = small_window_spec("int2-oscar");
  EXPECT_NE(on.name().find("+k-scale"), std::string::npos) << on.name();
  Transformer a(tiny_model(true, 15)), b(tiny_model(true, 15)), c(tiny_model(true, 15));
  a.configure_kv(on, &scaled_rs);
  b.configure_kv(off, &scaled_rs);
  c.configure_kv(off, &plain_rs);
  EXPECT_TRUE(b.key_scale(0).empty());
  const auto la = run_logits(a), lb = run_logits(b), lc = run_logits(c);
  EXPECT_GT(test::max_rel_error(la.data(), lb.data(), lb.size()), 1e-3);
  EXPECT_EQ(lb, lc);  // without the flag the scales are ignored

  auto refused = [&](const KvSpec& spec, const RotationSet* rs, const char* what) {
    Transformer d(tiny_model(false, 15));
    try {
      d.configure_kv(spec, rs);
      ADD_FAILURE() << "expected an error naming " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  RotationSet bad = scaled_rs;
  bad.layers[1].k_scale.assign(16, 1.5f);  // one KV head's worth; the model has two
  refused(on, &bad, "layer 1 k_scale");
  refused(on, &plain_rs, "--k-scale");  // no scale in the set: the flag would do nothing
  KvSpec int4 = small_window_spec("int4");
  int4.k_scale = true;
  refused(int4, nullptr, "--k-scale needs an OSCAR KV type");
}

}  // namespace
}  // namespace oscar

namespace oscar {
namespace {

// Transformer::kv_format(), the configured KV format as both engines take it: the windows
// and group; each layer's codes and clips (those of the CPU's history formats); R_K as the
// rotator applies it; R_V only where it is not absorbed; the key shifts and scales.
TEST(KvFormatOfTransformer, IsWhatConfigureKvChose) {
  {
    const Transformer t(tiny_model(false, 20));  // not configured: the default bf16 cache
    EXPECT_EQ(t.kv_format().n_layers(), 2);
    EXPECT_FALSE(t.kv_format().any_history());
  }
  {
    Transformer t(tiny_model(false, 20));
    KvSpec spec = small_window_spec("int2");
    spec.layer_types = parse_kv_layers("0:int4", 2);
    t.configure_kv(spec);
    const KvFormat& f = t.kv_format();
    EXPECT_EQ(f.sink, 2);
    EXPECT_EQ(f.window, 4);
    EXPECT_EQ(f.group, 16);
    EXPECT_EQ(f.bits(0), 4);
    EXPECT_EQ(f.v_bits(0), 4);
    EXPECT_EQ(f.bits(1), 2);
    EXPECT_TRUE(f.rot_k[0].empty());
    EXPECT_TRUE(f.rot_v.empty());
    EXPECT_TRUE(f.k_shift.empty());
  }
  const RotationSet rs = with_key_scales(with_key_means(random_rotations(2, 16, false, 70), 2, 94), 2, 122);
  for (bool absorb : {false, true}) {
    SCOPED_TRACE(absorb ? "R_V absorbed" : "R_V at run time");
    KvSpec spec = small_window_spec("int2-oscar");
    spec.k_mean = spec.k_scale = true;
    Transformer t(tiny_model(false, 20));
    t.configure_kv(spec, &rs, absorb);
    const KvFormat& f = t.kv_format();
    ASSERT_EQ(f.n_layers(), 2);
    EXPECT_EQ(f.rot_v.size(), absorb ? 0u : 2u);
    for (int l = 0; l < 2; ++l) {
      const size_t i = size_t(l);
      EXPECT_EQ(f.k_quant[i], KvQuant::int2);
      EXPECT_EQ(f.k_clip[i], t.k_history_format(l).clip);
      EXPECT_EQ(f.v_clip[i], t.v_history_format(l).clip);
      EXPECT_EQ(f.rot_k[i], rs.layers[i].k_rotation);
      if (!absorb) {
        EXPECT_EQ(f.rot_v[i], rs.layers[i].v_rotation);
      }
      ASSERT_EQ(f.k_shift.size(), 2u);
      EXPECT_EQ(f.k_shift[i], t.key_shift(l));
      EXPECT_EQ(f.k_shift[i].size(), 32u);
      ASSERT_EQ(f.k_scale.size(), 2u);
      EXPECT_EQ(f.k_scale[i], rs.layers[i].k_scale);
    }
  }
}

}  // namespace
}  // namespace oscar
