// GGUF file as a WeightSource: ModelConfig from metadata (defaults, optional tensors,
// arch-specific RoPE style), shapes outermost first, dequantized loads, and errors that
// name the file. Synthetic files come from GgufWriter; the real default model is checked
// when present.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "oscar/core/dtype.h"
#include "oscar/core/error.h"
#include "oscar/formats/gguf.h"
#include "oscar/model/gguf_weight_source.h"

namespace oscar {
namespace {

namespace fs = std::filesystem;

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& name)
      : path((fs::temp_directory_path() / ("oscar_gws_" + std::to_string(::getpid()) + "_" + name)).string()) {}
  ~TempFile() { fs::remove(path); }
};

std::vector<uint8_t> f32_bytes(const std::vector<float>& x) {
  std::vector<uint8_t> b(x.size() * 4);
  std::memcpy(b.data(), x.data(), b.size());
  return b;
}

// A tiny model: 2 layers, n_embd 8, 2 heads of 4, vocab 5 (tokenizer list and embedding rows).
gguf::GgufWriter tiny_model(const std::string& arch, bool with_tokens = true) {
  gguf::GgufWriter w;
  w.set_string("general.architecture", arch);
  w.set_string("general.name", "tiny " + arch);
  w.set_u32(arch + ".block_count", 2);
  w.set_u32(arch + ".embedding_length", 8);
  w.set_u32(arch + ".feed_forward_length", 16);
  w.set_u32(arch + ".attention.head_count", 2);
  w.set_u32(arch + ".context_length", 128);
  w.set_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  if (with_tokens) w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e"});
  std::vector<float> emb(5 * 8);
  for (size_t i = 0; i < emb.size(); ++i) emb[i] = float(i) * 0.5f;
  w.add_tensor("token_embd.weight", GgmlType::f32, {8, 5}, f32_bytes(emb));
  return w;
}

std::unique_ptr<WeightSource> open_written(const gguf::GgufWriter& w, const TempFile& f) {
  w.write(f.path);
  return open_gguf_source(f.path);
}

TEST(GgufWeightSource, LlamaDefaults) {
  TempFile tmp("llama.gguf");
  const auto src = open_written(tiny_model("llama"), tmp);
  const ModelConfig& c = src->config();
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.name, "tiny llama");
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_embd, 8);
  EXPECT_EQ(c.n_ff, 16);
  EXPECT_EQ(c.n_heads, 2);
  EXPECT_EQ(c.n_kv_heads, 2);   // default: head_count
  EXPECT_EQ(c.head_dim, 4);     // default: n_embd / n_heads
  EXPECT_EQ(c.n_vocab, 5);
  EXPECT_EQ(c.n_ctx_train, 128);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_EQ(c.rope_theta, 10000.0f);  // default
  EXPECT_EQ(c.rope_style, RopeStyle::interleaved);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);

  EXPECT_TRUE(src->has("token_embd.weight"));
  EXPECT_FALSE(src->has("output.weight"));
  EXPECT_EQ(src->shape("token_embd.weight"), (std::vector<int64_t>{5, 8}));  // outermost first
  const std::vector<float> emb = src->load_f32("token_embd.weight");
  ASSERT_EQ(emb.size(), 40u);
  EXPECT_EQ(emb[8 * 3 + 1], 12.5f);  // row 3, column 1
  try {
    src->shape("blk.9.attn_q.weight");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("blk.9.attn_q.weight"), std::string::npos) << e.what();
  }
  EXPECT_THROW(src->load_f32("nope"), Error);
}

TEST(GgufWeightSource, Qwen3ExplicitFieldsAndOptionalTensors) {
  gguf::GgufWriter w = tiny_model("qwen3");
  w.set_u32("qwen3.attention.head_count_kv", 1);
  w.set_u32("qwen3.attention.key_length", 6);
  w.set_f32("qwen3.rope.freq_base", 1e6f);
  w.set_string("qwen3.rope.scaling.type", "yarn");
  w.set_f32("qwen3.rope.scaling.factor", 4.0f);
  w.set_u32("qwen3.rope.scaling.original_context_length", 32768);
  const std::vector<float> one(8, 1.0f);
  w.add_tensor("output.weight", GgmlType::f32, {8, 5}, f32_bytes(std::vector<float>(40, 0.25f)));
  w.add_tensor("blk.0.attn_q.bias", GgmlType::f32, {8}, f32_bytes(one));
  w.add_tensor("blk.0.attn_q_norm.weight", GgmlType::f32, {8}, f32_bytes(one));
  std::vector<uint8_t> h(16);  // F16 tensor: loads dequantized
  for (int i = 0; i < 8; ++i) {
    const fp16 x = f32_to_fp16(float(i) - 3.5f);
    std::memcpy(&h[2 * i], &x.bits, 2);
  }
  w.add_tensor("blk.0.ffn_norm.weight", GgmlType::f16, {8}, h);
  TempFile tmp("qwen3.gguf");
  const auto src = open_written(w, tmp);
  const ModelConfig& c = src->config();
  EXPECT_EQ(c.arch, Arch::qwen3);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 6);
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_style, RopeStyle::neox);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_EQ(c.rope_scaling.factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_context, 32768);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.qk_norm);
  const std::vector<float> norm = src->load_f32("blk.0.ffn_norm.weight");
  ASSERT_EQ(norm.size(), 8u);
  EXPECT_EQ(norm[0], -3.5f);
  EXPECT_EQ(norm[7], 3.5f);
}

TEST(GgufWeightSource, Qwen2IsNeoxAndVocabFromEmbeddingWithoutTokenizer) {
  TempFile tmp("qwen2.gguf");
  const auto src = open_written(tiny_model("qwen2", /*with_tokens=*/false), tmp);
  EXPECT_EQ(src->config().arch, Arch::qwen2);
  EXPECT_EQ(src->config().rope_style, RopeStyle::neox);
  EXPECT_EQ(src->config().n_vocab, 5);  // token_embd rows
}

void expect_open_error(const gguf::GgufWriter& w, const std::string& needle) {
  TempFile tmp("bad.gguf");
  w.write(tmp.path);
  try {
    open_gguf_source(tmp.path);
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(tmp.path), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(GgufWeightSource, BadMetadataNamesFileAndKey) {
  gguf::GgufWriter a = tiny_model("llama");
  a.set_string("general.architecture", "gpt2");
  expect_open_error(a, "unsupported model architecture 'gpt2'");
  gguf::GgufWriter b = tiny_model("llama");
  b.set_u32("llama.attention.head_count_kv", 3);  // 2 heads not a multiple of 3
  expect_open_error(b, "n_kv_heads");
  gguf::GgufWriter c = tiny_model("llama");
  c.set_string("llama.block_count", "two");
  expect_open_error(c, "llama.block_count");
  gguf::GgufWriter d;
  d.set_string("general.architecture", "llama");
  expect_open_error(d, "missing metadata key 'llama.block_count'");
  gguf::GgufWriter e = tiny_model("llama");
  e.set("llama.feed_forward_length", [] {
    gguf::Value v;
    v.type = gguf::ValueType::i64;
    v.i = -5;
    return v;
  }());
  expect_open_error(e, "llama.feed_forward_length");
  gguf::GgufWriter g = tiny_model("llama");
  g.set_u32("llama.attention.head_count", 0);
  expect_open_error(g, "head_count");
  gguf::GgufWriter h = tiny_model("llama");
  h.set_u32("llama.context_length", 0);  // accepted and run before
  expect_open_error(h, "n_ctx_train (the trained context length) = 0");
}

TEST(GgufWeightSource, SmolLM2Config) {
  const char* env = std::getenv("OSCAR_MODEL");
  const std::string path = env && *env ? env : "/root/.cache/oscar/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not found (run scripts/setup.sh)";
  if (fs::path(path).filename() != "SmolLM2-135M-Instruct.Q4_1.gguf")
    GTEST_SKIP() << "expectations are for SmolLM2-135M-Instruct.Q4_1.gguf";
  const auto src = open_gguf_source(path);
  const ModelConfig& c = src->config();
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.n_embd, 576);
  EXPECT_EQ(c.n_ff, 1536);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_vocab, 49152);
  EXPECT_EQ(c.n_ctx_train, 8192);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_EQ(c.rope_style, RopeStyle::interleaved);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(src->shape("token_embd.weight"), (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ(src->shape("blk.0.ffn_down.weight"), (std::vector<int64_t>{576, 1536}));
  EXPECT_EQ(src->shape("blk.0.attn_k.weight"), (std::vector<int64_t>{192, 576}));
  const std::vector<float> q = src->load_f32("blk.0.attn_q.weight");  // Q4_1
  EXPECT_EQ(q.size(), 576u * 576u);
}

}  // namespace
}  // namespace oscar
