// HF checkpoint as a WeightSource: config.json fields, HF -> GGUF tensor names, exact
// values from the fixture written by tests/reference/make_safetensors_fixture.py.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "oscar/core/error.h"
#include "oscar/model/hf_config.h"
#include "oscar/model/model_weights.h"
#include "oscar/model/safetensors_weight_source.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace oscar;

namespace {

const std::string fixture_dir = std::string(OSCAR_SOURCE_DIR) + "/tests/data/tiny_llama_st";

json expected_tensors() {
  std::ifstream f(fixture_dir + "/expected.json");
  return json::parse(f)["tensors"];
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("oscar_sts_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// A one-tensor-per-entry safetensors file of F32 zeros.
void write_zeros_safetensors(const fs::path& p, const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
  json h = json::object();
  uint64_t off = 0;
  for (const auto& [name, shape] : tensors) {
    uint64_t n = 4;
    for (auto d : shape) n *= uint64_t(d);
    h[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  const std::string hs = h.dump();
  const uint64_t len = hs.size();
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&len), 8);
  f << hs;
  f << std::string(off, '\0');
}

const char* qwen2_config = R"({
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
  "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
  "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
  "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "rope_scaling": null, "tie_word_embeddings": true, "sliding_window": 32768})";

const char* qwen3_config = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "head_dim": 128,
  "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
  "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 151936,
  "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
  "tie_word_embeddings": true})";

void expect_config_error(const std::string& text, const char* needle) {
  try {
    parse_hf_config(text, "cfg.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

}  // namespace

TEST(SafetensorsSource, FixtureConfig) {
  const auto src = open_safetensors_source(fixture_dir);
  const ModelConfig& c = src->config();
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.name, "tiny_llama_st");
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_embd, 8);
  EXPECT_EQ(c.n_ff, 16);
  EXPECT_EQ(c.n_heads, 2);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 4);  // "head_dim": null -> hidden / heads
  EXPECT_EQ(c.n_vocab, 16);
  EXPECT_EQ(c.n_ctx_train, 128);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_style, RopeStyle::neox);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_context, 64);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
}

TEST(SafetensorsSource, TensorsUnderGgufNamesWithExactValues) {
  const auto src = open_safetensors_source(fixture_dir);
  const json expected = expected_tensors();  // the loop below must not iterate a temporary
  int mapped = 0;
  for (const auto& [hf, e] : expected.items()) {
    SCOPED_TRACE(hf);
    EXPECT_FALSE(src->has(hf));  // only GGUF names are exposed
    if (e["gguf"].is_null()) continue;
    const std::string name = e["gguf"].get<std::string>();
    ASSERT_TRUE(src->has(name)) << name;
    EXPECT_EQ(src->shape(name), e["shape"].get<std::vector<int64_t>>());  // [out, in] as stored
    const auto got = src->load_f32(name);
    const auto want = e["values"].get<std::vector<double>>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(float(want[i]))) << "element " << i;
    ++mapped;
  }
  EXPECT_EQ(mapped, 3 + 2 * 9);
  EXPECT_FALSE(src->has("blk.0.attn_q.bias"));
  EXPECT_THROW(src->shape("blk.0.attn_q.bias"), Error);
  EXPECT_THROW(src->load_f32("blk.9.attn_q.weight"), Error);
}

TEST(SafetensorsSource, OpensTheFileWithConfigBeside) {
  const auto src = open_safetensors_source(fixture_dir + "/model.safetensors");
  EXPECT_EQ(src->config().n_layers, 2);
  EXPECT_EQ(src->config().name, "tiny_llama_st");
  EXPECT_TRUE(src->has("output.weight"));
  // A trailing slash names the same directory.
  EXPECT_EQ(open_safetensors_source(fixture_dir + "/")->config().name, "tiny_llama_st");
}

TEST(SafetensorsSource, MissingConfigOrWeights) {
  TempDir dir("missing");
  EXPECT_THROW(open_safetensors_source(dir.path.string()), Error);  // no config.json
  fs::copy_file(fixture_dir + "/config.json", dir.path / "config.json");
  EXPECT_THROW(open_safetensors_source(dir.path.string()), Error);  // no weights
  EXPECT_THROW(open_safetensors_source((dir.path / "absent.safetensors").string()), Error);
  // Weights without the embedding table are refused up front, naming it.
  write_zeros_safetensors(dir.path / "model.safetensors", {{"model.norm.weight", {8}}});
  try {
    open_safetensors_source(dir.path.string());
    FAIL() << "accepted a model without embeddings";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token_embd.weight"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsSource, TiedQwen2WithBiasesFromShards) {
  TempDir dir("qwen2");
  std::ofstream(dir.path / "config.json") << R"({"architectures":["Qwen2ForCausalLM"],"hidden_size":8,
      "intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,
      "vocab_size":4,"tie_word_embeddings":true})";
  write_zeros_safetensors(dir.path / "model-00001-of-00002.safetensors",
                          {{"model.embed_tokens.weight", {4, 8}}, {"model.norm.weight", {8}}});
  write_zeros_safetensors(dir.path / "model-00002-of-00002.safetensors",
                          {{"model.layers.0.self_attn.q_proj.bias", {8}}, {"model.layers.0.self_attn.k_proj.weight", {8, 8}}});
  const auto src = open_safetensors_source(dir.path.string());
  EXPECT_EQ(src->config().arch, Arch::qwen2);
  EXPECT_TRUE(src->config().qkv_bias);
  EXPECT_TRUE(src->config().tied_embeddings);
  EXPECT_FALSE(src->has("output.weight"));
  EXPECT_EQ(src->shape("blk.0.attn_q.bias"), std::vector<int64_t>{8});
  EXPECT_EQ(src->load_f32("blk.0.attn_k.weight"), std::vector<float>(64, 0.0f));
}

TEST(SafetensorsSource, UntiedConfigWithoutLmHeadFallsBackToTied) {
  TempDir dir("untied");
  fs::copy_file(fixture_dir + "/config.json", dir.path / "config.json");  // tie_word_embeddings: false
  write_zeros_safetensors(dir.path / "model.safetensors", {{"model.embed_tokens.weight", {16, 8}}, {"model.norm.weight", {8}}});
  EXPECT_TRUE(open_safetensors_source(dir.path.string())->config().tied_embeddings);
}

TEST(HfNames, MapsEveryEngineTensor) {
  const std::pair<const char*, const char*> cases[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
      {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
      {"model.layers.12.self_attn.q_proj.weight", "blk.12.attn_q.weight"},
      {"model.layers.3.self_attn.k_proj.bias", "blk.3.attn_k.bias"},
      {"model.layers.3.self_attn.v_proj.bias", "blk.3.attn_v.bias"},
      {"model.layers.3.self_attn.o_proj.weight", "blk.3.attn_output.weight"},
      {"model.layers.27.self_attn.q_norm.weight", "blk.27.attn_q_norm.weight"},
      {"model.layers.27.self_attn.k_norm.weight", "blk.27.attn_k_norm.weight"},
      {"model.layers.5.post_attention_layernorm.weight", "blk.5.ffn_norm.weight"},
      {"model.layers.5.mlp.gate_proj.weight", "blk.5.ffn_gate.weight"},
      {"model.layers.5.mlp.up_proj.weight", "blk.5.ffn_up.weight"},
      {"model.layers.5.mlp.down_proj.weight", "blk.5.ffn_down.weight"},
  };
  for (const auto& [hf, gguf] : cases) EXPECT_EQ(hf_to_gguf_name(hf), std::optional<std::string>(gguf)) << hf;
  for (const char* unused : {"model.layers.0.self_attn.rotary_emb.inv_freq", "model.layers..mlp.up_proj.weight",
                             "model.layers.01.mlp.up_proj.weight", "model.layers.x.mlp.up_proj.weight",
                             "model.layers.1", "model.layers.1.mlp.up_proj.weight.extra", "embed_tokens.weight", ""})
    EXPECT_EQ(hf_to_gguf_name(unused), std::nullopt) << unused;
}

TEST(HfConfig, Qwen2AndQwen3) {
  const ModelConfig q2 = parse_hf_config(qwen2_config, "qwen2.json");
  EXPECT_EQ(q2.arch, Arch::qwen2);
  EXPECT_EQ(q2.head_dim, 64);
  EXPECT_EQ(q2.n_kv_heads, 2);
  EXPECT_TRUE(q2.qkv_bias);
  EXPECT_FALSE(q2.qk_norm);
  EXPECT_TRUE(q2.tied_embeddings);
  EXPECT_EQ(q2.rope_scaling.type, "none");
  EXPECT_FLOAT_EQ(q2.rope_theta, 1e6f);
  EXPECT_EQ(q2.rope_style, RopeStyle::neox);

  const ModelConfig q3 = parse_hf_config(qwen3_config, "qwen3.json");
  EXPECT_EQ(q3.arch, Arch::qwen3);
  EXPECT_EQ(q3.head_dim, 128);  // explicit, not hidden / heads = 64
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_FALSE(q3.qkv_bias);
  EXPECT_EQ(q3.n_ctx_train, 40960);
}

TEST(HfConfig, DefaultsAndAlternativeSpellings) {
  // model_type instead of architectures; kv heads default to heads; attention_bias on llama.
  const ModelConfig c = parse_hf_config(
      R"({"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
          "num_attention_heads":4,"vocab_size":100,"attention_bias":true,
          "rope_scaling":{"type":"linear","factor":2.0}})",
      "c.json");
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 2.0f);

  // transformers 5 moves theta and scaling into rope_parameters.
  const ModelConfig v5 = parse_hf_config(
      R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
          "num_attention_heads":4,"vocab_size":100,"rope_parameters":{"rope_type":"default","rope_theta":250000.0}})",
      "v5.json");
  EXPECT_FLOAT_EQ(v5.rope_theta, 250000.0f);
  EXPECT_EQ(v5.rope_scaling.type, "none");
}

TEST(HfConfig, ErrorsNameTheField) {
  const std::string base = R"("hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100)";
  expect_config_error("{", "JSON");
  expect_config_error("[]", "object");
  expect_config_error(R"({"architectures":["MistralForCausalLM"],)" + base + "}", "MistralForCausalLM");
  expect_config_error("{" + base + "}", "architectures");
  expect_config_error(R"({"model_type":"gpt2",)" + base + "}", "gpt2");
  expect_config_error(R"({"model_type":"llama","intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100})",
                      "hidden_size");
  expect_config_error(R"({"model_type":"llama",)" + base + R"(,"num_key_value_heads":"2"})", "num_key_value_heads");
  expect_config_error(R"({"model_type":"llama",)" + base + R"(,"num_key_value_heads":3})", "n_kv_heads");
  expect_config_error(R"({"model_type":"llama",)" + base + R"(,"num_attention_heads":0})", "num_attention_heads");
  expect_config_error(R"({"model_type":"llama",)" + base + R"(,"vocab_size":99999999999})", "vocab_size");
  expect_config_error(R"({"model_type":"llama",)" + base + R"(,"rms_norm_eps":"small"})", "rms_norm_eps");
  expect_config_error(R"({"model_type":"llama",)" + base + R"(,"tie_word_embeddings":1})", "tie_word_embeddings");
  expect_config_error(R"({"model_type":"llama",)" + base + R"(,"rope_scaling":{"rope_type":"dynamic","factor":2}})", "dynamic");
  expect_config_error(R"({"model_type":"llama",)" + base + R"(,"rope_scaling":{"rope_type":"linear","factor":0}})", "factor");
  expect_config_error(R"({"model_type":"llama",)" + base + R"(,"rope_scaling":7})", "rope_scaling");
}

namespace {
// --weights native on a checkpoint: F16 / BF16 matrices stay views of the mapped file
// (no f32 copy) and hold exactly the values the f32 load gives.
TEST(SafetensorsSource, NativeStorageKeepsStoredRows) {
  const auto src = open_weight_source(fixture_dir);
  const ModelWeights f32 = load_model_weights(*src, WeightStorage::f32);
  const ModelWeights native = load_model_weights(*src, WeightStorage::native);
  int views = 0;
  auto check = [&](const WeightMatrix& a, const WeightMatrix& b, const std::string& what) {
    EXPECT_EQ(a.to_f32(), b.to_f32()) << what;
    EXPECT_TRUE(a.owns_f32()) << what;
    if (!b.owns_f32()) ++views;
    if (b.type() != GgmlType::f32) {
      EXPECT_LT(b.bytes(), a.bytes()) << what;
    }
  };
  check(f32.token_embd, native.token_embd, "token_embd");
  for (size_t l = 0; l < f32.layers.size(); ++l) {
    const LayerWeights &a = f32.layers[l], &b = native.layers[l];
    check(a.wq, b.wq, "wq"), check(a.wk, b.wk, "wk"), check(a.wv, b.wv, "wv"), check(a.wo, b.wo, "wo");
    check(a.w_gate, b.w_gate, "w_gate"), check(a.w_up, b.w_up, "w_up"), check(a.w_down, b.w_down, "w_down");
  }
  EXPECT_EQ(views, 1 + 7 * int(f32.layers.size()));  // every matrix is a view
}
}  // namespace
