// The bridge to the CUDA backend, on the CPU (no GPU needed): shapes, BF16 rounding, the KV
// format per layer, refusals, and the GPU-vs-CPU fixtures (written to $OSCAR_CUDA_FIXTURE_DIR
// or ./cuda_fixtures; bench/cuda/run.sh carries them to the GPU, where oscar_cuda_tests
// compares DeviceModel's logits with the CPU logits stored in them).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../mixed_cache_util.h"
#include "oscar/core/dtype.h"
#include "oscar/core/error.h"
#include "device_fixture.h"
#include "oscar/engine/cuda/device_model_loader.h"
#include "oscar/rotation/hadamard.h"
#include "../tiny_model.h"

namespace oscar {
namespace {

std::vector<int> layer_bits(const KvFormat& f) {
  std::vector<int> b;
  for (int l = 0; l < f.n_layers(); ++l) b.push_back(f.bits(l));
  return b;
}

RotationSet random_rotations(int n_layers, int d) {
  RotationSet rs;
  rs.head_dim = d;
  rs.group_size = d;
  rs.sink_tokens = 16;
  rs.recent_tokens = 32;
  for (int l = 0; l < n_layers; ++l) {
    LayerRotation lr;
    lr.layer = l;
    lr.k_rotation = test::random_orthogonal(d, uint64_t(300 + 2 * l));
    lr.v_rotation = test::random_orthogonal(d, uint64_t(301 + 2 * l));
    lr.k_clip = 0.95f - 0.02f * float(l);
    lr.v_clip = 0.9f;
    rs.layers.push_back(std::move(lr));
  }
  return rs;
}

KvSpec small_windows(const char* mode) {
  KvSpec s = KvSpec::parse(mode);
  s.sink = 16;
  s.recent = 32;
  s.k_bias_split = false;  // on by default for int2-oscar: the cases that split say so
  return s;
}

// The tiny model with every weight already a BF16 value, so that the GPU and the CPU start
// from the same numbers (the GPU stores BF16).
ModelWeights bf16_exact_model(bool qwen2, uint64_t seed) {
  ModelWeights w = test::tiny_model(qwen2, seed, /*n_layers=*/2, /*head_dim=*/64);
  auto round = [](WeightMatrix& m) {
    float* v = m.mutable_f32();
    for (int64_t i = 0; i < m.rows() * m.cols(); ++i) v[i] = bf16_to_f32(f32_to_bf16(v[i]));
  };
  round(w.token_embd);
  round(w.output);
  for (LayerWeights& l : w.layers)
    for (auto* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) round(*t);
  return w;
}

TEST(DeviceModelLoader, ShapeAndWeights) {
  Transformer t(bf16_exact_model(true, 7));
  const cuda::HostModel m = device_host_model(t);
  EXPECT_EQ(m.dims.n_layers, 2);
  EXPECT_EQ(m.dims.head_dim, 64);
  EXPECT_TRUE(m.dims.qkv_bias);
  EXPECT_EQ(m.rope.style, RopeStyle::neox);
  ASSERT_EQ(m.rope.inv_freq.size(), 32u);
  EXPECT_DOUBLE_EQ(m.rope.inv_freq[0], 1.0);
  ASSERT_EQ(m.layers.size(), 2u);
  const LayerWeights& l1 = t.weights().layers[1];
  const std::vector<float> wk = l1.wk.to_f32();
  ASSERT_EQ(m.layers[1].wk.size(), wk.size());
  for (size_t i = 0; i < wk.size(); ++i) ASSERT_EQ(bf16_to_f32(bf16{m.layers[1].wk[i]}), wk[i]) << i;
  EXPECT_EQ(m.layers[1].bk, l1.bk);
  EXPECT_EQ(int64_t(m.output.size()), t.weights().output.rows() * t.weights().output.cols());
}

TEST(DeviceModelLoader, KvFormats) {
  {
    Transformer t(bf16_exact_model(false, 8));
    t.configure_kv(small_windows("bf16"));
    const KvFormat& f = device_kv_format(t);
    EXPECT_EQ(layer_bits(f), (std::vector<int>{0, 0}));
    EXPECT_TRUE(f.rot_v.empty());
    EXPECT_TRUE(f.rot_k[0].empty());
  }
  {
    Transformer t(bf16_exact_model(false, 8));
    t.configure_kv(small_windows("int2-hadamard"));
    const KvFormat& f = device_kv_format(t);
    EXPECT_EQ(layer_bits(f), (std::vector<int>{2, 2}));
    EXPECT_EQ(f.group, 64);
    EXPECT_EQ(f.sink, 16);
    EXPECT_EQ(f.window, 32);
    EXPECT_EQ(f.rot_k[1], hadamard_matrix(64));
    ASSERT_EQ(f.rot_v.size(), 2u);
    EXPECT_EQ(f.rot_v[0], hadamard_matrix(64));
  }
  {
    Transformer t(bf16_exact_model(false, 8));
    const RotationSet rs = random_rotations(2, 64);
    t.configure_kv(small_windows("int2-oscar"), &rs);
    const KvFormat& f = device_kv_format(t);
    EXPECT_EQ(f.rot_k[1], rs.layers[1].k_rotation);
    EXPECT_TRUE(f.rot_v.empty()) << "R_V is absorbed into W_v / W_o";
    EXPECT_FLOAT_EQ(f.k_clip[0], 0.95f);
    EXPECT_FLOAT_EQ(f.k_clip[1], 0.93f);
    EXPECT_FLOAT_EQ(f.v_clip[1], 0.9f);
  }
  {
    Transformer t(bf16_exact_model(false, 8));
    KvSpec s = small_windows("int2");
    s.layer_types = parse_kv_layers("0:int4", 2);
    t.configure_kv(s);
    EXPECT_EQ(layer_bits(device_kv_format(t)), (std::vector<int>{4, 2}));
  }
}

TEST(DeviceModelLoader, RefusesWhatTheDeviceLacks) {
  for (const char* mode : {"kivi2", "int2-oscar-lloydmax", "f32"}) {
    Transformer t(bf16_exact_model(false, 9));
    const RotationSet rs = random_rotations(2, 64);
    t.configure_kv(small_windows(mode), &rs);
    try {
      device_kv_format(t);
      ADD_FAILURE() << mode << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
    }
  }
  Transformer t(test::tiny_model(false, 9, 2, 16));
  EXPECT_THROW(check_device_model(t.config()), Error);  // head_dim 16
  // --k-bias-split travels as a flag, on where the model has a key bias (the CUDA cache
  // splits it off like the CPU's); a model without one has nothing to split.
  KvSpec split = small_windows("int2-oscar");
  split.k_bias_split = true;
  const RotationSet rs = random_rotations(2, 64);
  Transformer q(bf16_exact_model(true, 9)), no_bias(bf16_exact_model(false, 9));
  q.configure_kv(split, &rs);
  no_bias.configure_kv(split, &rs);
  EXPECT_TRUE(device_kv_format(q).k_bias_split);
  EXPECT_FALSE(device_kv_format(no_bias).k_bias_split);
  Transformer q_off(bf16_exact_model(true, 9));
  q_off.configure_kv(small_windows("int2-oscar"), &rs);
  EXPECT_FALSE(device_kv_format(q_off).k_bias_split);
  // A calibrated key mean (--k-mean) travels as each layer's key shift, in R_K's basis
  // (what Transformer::key_shift holds); --no-k-mean sends none.
  RotationSet meaned = random_rotations(2, 64);
  for (LayerRotation& l : meaned.layers) l.k_mean = test::random_vector(size_t(2 * 64), 30 + uint64_t(l.layer), -2.0f, 2.0f);
  Transformer m(bf16_exact_model(false, 9)), n(bf16_exact_model(false, 9));
  m.configure_kv(small_windows("int2-oscar"), &meaned);
  const KvFormat& fm = device_kv_format(m);
  ASSERT_EQ(fm.k_shift.size(), 2u);
  for (int l = 0; l < 2; ++l) {
    EXPECT_EQ(fm.k_shift[size_t(l)], m.key_shift(l));
    std::vector<float> want = meaned.layers[size_t(l)].k_mean;
    rotate_rows(meaned.layers[size_t(l)].k_rotation.data(), 64, meaned.layers[size_t(l)].k_mean.data(), want.data(), 2);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(fm.k_shift[size_t(l)][i], want[i], 1e-5f) << l << " " << i;
  }
  KvSpec no_mean = small_windows("int2-oscar");
  no_mean.k_mean = false;
  n.configure_kv(no_mean, &meaned);
  EXPECT_TRUE(device_kv_format(n).k_shift.empty());
  // A per-channel key scale (--k-scale) has no place in the CUDA prologue yet: refused by name;
  // the same set without the flag goes through.
  RotationSet scaled = meaned;
  for (LayerRotation& l : scaled.layers) l.k_scale = test::random_vector(size_t(2 * 64), 50 + uint64_t(l.layer), 0.5f, 2.0f);
  Transformer ks(bf16_exact_model(false, 9)), plain(bf16_exact_model(false, 9));
  KvSpec with_scale = small_windows("int2-oscar");
  with_scale.k_scale = true;
  ks.configure_kv(with_scale, &scaled);
  try {
    device_kv_format(ks);
    ADD_FAILURE() << "--k-scale was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--k-scale is not supported on --device cuda yet"), std::string::npos) << e.what();
  }
  plain.configure_kv(small_windows("int2-oscar"), &scaled);
  EXPECT_EQ(device_kv_format(plain).k_shift.size(), 2u);
}

// The GPU-vs-CPU cases: the CPU's logits for every position of 120 random tokens with
// windows small enough (16 + 32) that most keys are history.
TEST(DeviceModelLoader, WritesGpuFixtures) {
  const char* env = std::getenv("OSCAR_CUDA_FIXTURE_DIR");
  const std::filesystem::path dir = env ? env : "cuda_fixtures";
  std::filesystem::create_directories(dir);
  struct Case {
    const char* name;
    bool qwen2;
    const char* mode;
    bool k_bias_split = false;  // with a key bias 10x the tiny model's (Qwen2.5's is large)
  };
  for (const Case& c : {Case{"llama_bf16", false, "bf16"}, Case{"qwen2_int2_hadamard", true, "int2-hadamard"},
                        Case{"qwen2_int2_oscar", true, "int2-oscar"}, Case{"llama_int4", false, "int4"},
                        Case{"llama_int2_oscar_kmean", false, "int2-oscar"}, Case{"llama_int8", false, "int8"},
                        Case{"qwen2_int2_oscar_kbias", true, "int2-oscar", true},
                        Case{"qwen2_bf16_kbias", true, "bf16", true}}) {
    ModelWeights w = bf16_exact_model(c.qwen2, 11);
    if (c.k_bias_split)
      for (LayerWeights& l : w.layers)
        for (float& b : l.bk) b *= 10.0f;
    Transformer t(std::move(w));
    RotationSet rs = random_rotations(2, 64);
    if (std::string(c.name).ends_with("kmean"))  // --k-mean: a key shift per layer
      for (LayerRotation& l : rs.layers) l.k_mean = test::random_vector(size_t(2 * 64), 40 + uint64_t(l.layer), -3.0f, 3.0f);
    // R_V stays out of W_v / W_o here: absorbed (in double), the weights would no longer be
    // BF16 values, and the GPU's BF16 copy would differ from the CPU's f32 one by more than
    // the comparison's tolerance. The GPU then rotates v and un-rotates the output itself.
    KvSpec spec = small_windows(c.mode);
    spec.k_bias_split = c.k_bias_split;
    t.configure_kv(spec, &rs, /*absorb_v=*/false);
    const std::vector<float> r = test::random_vector(120, 12, 0.0f, 49.999f);
    std::vector<int32_t> tokens;
    for (float x : r) tokens.push_back(int32_t(x));
    KvCache cache = t.make_cache(128);
    const SeqId seq = cache.add_sequence();
    std::vector<float> logits;
    t.forward(cache, seq, tokens, LogitsFor::all, logits);
    const std::filesystem::path path = dir / (std::string(c.name) + ".bin");
    write_device_fixture(path.string(), device_host_model(t), device_kv_format(t), tokens, logits);
    std::ifstream in(path, std::ios::binary);
    char magic[8] = {};
    in.read(magic, 8);
    EXPECT_STREQ(magic, "OSCFIX3");
    EXPECT_GT(std::filesystem::file_size(path), 120u * 50u * 4u);
  }
}

}  // namespace
}  // namespace oscar
