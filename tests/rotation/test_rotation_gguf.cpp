#include <gtest/gtest.h>

#include <filesystem>

#include <unistd.h>

#include "oscar/formats/gguf.h"
#include "oscar/core/error.h"
#include "oscar/rotation/hadamard.h"
#include "oscar/rotation/rotation_gguf.h"

namespace oscar {
namespace {

// A GGUF "model" with one tensor, rotations embedded and read back exactly.
TEST(RotationGguf, EmbedAndReadBack) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fs::path("oscar_rot_gguf_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  gguf::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  std::vector<uint8_t> data(16 * 4, 0);
  w.add_tensor("token_embd.weight", GgmlType::f32, {4, 4}, data);
  w.write((dir / "model.gguf").string());

  RotationSet rs;
  rs.head_dim = 16;
  rs.group_size = 16;
  for (int l = 0; l < 2; ++l) {
    LayerRotation lr;
    lr.layer = l;
    lr.k_rotation = hadamard_matrix(16);
    if (l == 1) lr.v_rotation = hadamard_matrix(16);  // layer 0 V: identity (empty)
    lr.k_clip = 0.9f + 0.01f * float(l);
    lr.v_clip = 0.8f;
    rs.layers.push_back(lr);
  }
  const gguf::GgufFile model = gguf::GgufFile::open((dir / "model.gguf").string());
  EXPECT_FALSE(read_embedded_rotations(model).has_value());
  embed_rotations(model, rs, (dir / "with.gguf").string());
  const gguf::GgufFile with = gguf::GgufFile::open((dir / "with.gguf").string());
  const auto back = read_embedded_rotations(with);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->head_dim, 16);
  ASSERT_EQ(back->layers.size(), 2u);
  EXPECT_EQ(back->layers[0].k_rotation, rs.layers[0].k_rotation);
  EXPECT_EQ(back->layers[1].v_rotation, rs.layers[1].v_rotation);
  EXPECT_FLOAT_EQ(back->layers[0].v_rotation[0], 1.0f);  // identity written out explicitly
  EXPECT_FLOAT_EQ(back->layers[1].k_clip, 0.91f);
  EXPECT_NE(with.find_tensor("token_embd.weight"), nullptr);  // the model is all still there
  EXPECT_THROW(embed_rotations(with, rs, (dir / "twice.gguf").string()), Error);
  EXPECT_EQ(back->kv_layers, "");

  // Per-layer KV types from --kv-budget travel in the metadata.
  rs.kv_layers = "1:int4";
  rs.kv_budget_bits = 3.25;
  embed_rotations(model, rs, (dir / "typed.gguf").string());
  const auto typed = read_embedded_rotations(gguf::GgufFile::open((dir / "typed.gguf").string()));
  ASSERT_TRUE(typed.has_value());
  EXPECT_EQ(typed->kv_layers, "1:int4");
  EXPECT_DOUBLE_EQ(typed->kv_budget_bits, 3.25);
  // Calibrated key means (--k-mean) travel as tensors; layers without one stay without.
  rs.kv_layers.clear();
  rs.layers[1].k_mean.assign(32, 0.0f);
  for (size_t i = 0; i < 32; ++i) rs.layers[1].k_mean[i] = float(i) * 0.5f - 3.0f;
  embed_rotations(model, rs, (dir / "mean.gguf").string());
  const auto meaned = read_embedded_rotations(gguf::GgufFile::open((dir / "mean.gguf").string()));
  ASSERT_TRUE(meaned.has_value());
  EXPECT_TRUE(meaned->layers[0].k_mean.empty());
  EXPECT_EQ(meaned->layers[1].k_mean, rs.layers[1].k_mean);
  // Key scales (--k-scale) likewise.
  rs.layers[0].k_scale.assign(32, 0.0f);
  for (size_t i = 0; i < 32; ++i) rs.layers[0].k_scale[i] = 0.5f + float(i) * 0.125f;
  embed_rotations(model, rs, (dir / "scale.gguf").string());
  const auto scaled = read_embedded_rotations(gguf::GgufFile::open((dir / "scale.gguf").string()));
  ASSERT_TRUE(scaled.has_value());
  EXPECT_EQ(scaled->layers[0].k_scale, rs.layers[0].k_scale);
  EXPECT_TRUE(scaled->layers[1].k_scale.empty());
  EXPECT_EQ(scaled->layers[1].k_mean, rs.layers[1].k_mean);
  rs.layers[0].k_scale[3] = 0.0f;  // not > 0: refused before anything is written
  EXPECT_THROW(embed_rotations(model, rs, (dir / "bad_scale.gguf").string()), Error);
  rs.layers[0].k_scale.clear();
  rs.layers[1].k_mean.clear();
  rs.kv_layers = "2:int4";  // layer 2 of a 2-layer set
  EXPECT_THROW(embed_rotations(model, rs, (dir / "bad.gguf").string()), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace oscar
