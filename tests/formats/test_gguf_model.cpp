// The real default model (SmolLM2-135M-Instruct Q4_1, installed by scripts/setup.sh):
// parses, has the expected metadata, and its Q8_0 token_embd rows dequantize exactly as
// gguf-py does (tests/data/smollm2_token_embd_rows.json, written by
// tests/reference/make_quant_fixture.py). Skipped when the model is absent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "oscar/formats/gguf.h"

namespace oscar::gguf {
namespace {

std::string model_path() {
  const char* env = std::getenv("OSCAR_MODEL");
  return env && *env ? env : "/root/.cache/oscar/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(GgufModel, SmolLM2MetadataAndEmbeddingRows) {
  const std::string path = model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found (run scripts/setup.sh)";
  if (std::filesystem::path(path).filename() != "SmolLM2-135M-Instruct.Q4_1.gguf")
    GTEST_SKIP() << "expectations are for SmolLM2-135M-Instruct.Q4_1.gguf, not " << path;
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 30);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 576);
  EXPECT_EQ(f.get_int("llama.feed_forward_length"), 1536);
  EXPECT_EQ(f.get_int("llama.attention.head_count"), 9);
  EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(f.get_int("llama.rope.dimension_count"), 64);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type").size(), 49152u);

  const TensorInfo& emb = f.tensor("token_embd.weight");
  EXPECT_EQ(emb.type, GgmlType::q8_0);
  EXPECT_EQ(emb.ne, (std::vector<uint64_t>{576, 49152}));
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied embeddings

  std::ifstream in(std::string(OSCAR_SOURCE_DIR) + "/tests/data/smollm2_token_embd_rows.json");
  ASSERT_TRUE(in) << "missing tests/data/smollm2_token_embd_rows.json";
  const auto ref = nlohmann::json::parse(in);
  const uint64_t row_bytes = ggml_row_bytes(emb.type, 576);
  std::vector<float> row(576);
  ASSERT_FALSE(ref["rows"].empty());
  for (const auto& [index, values] : ref["rows"].items()) {
    const uint64_t r = std::stoull(index);
    dequantize_row(emb.type, emb.data + r * row_bytes, row.data(), 576);
    ASSERT_EQ(values.size(), 576u);
    for (size_t k = 0; k < 576; ++k) {
      const float want = values[k].get<float>();
      ASSERT_LE(std::fabs(row[k] - want), 1e-6f * (1 + std::fabs(want))) << "row " << r << " element " << k;
    }
  }
  // Whole-tensor dequantization agrees with the row path.
  const std::vector<float> all = f.dequantize(emb);
  ASSERT_EQ(all.size(), 576u * 49152u);
  dequantize_row(emb.type, emb.data + 49151 * row_bytes, row.data(), 576);
  for (size_t k = 0; k < 576; ++k) ASSERT_EQ(all[49151 * 576 + k], row[k]);
}

}  // namespace
}  // namespace oscar::gguf
