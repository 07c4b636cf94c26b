// `oscar make-model`'s library half: the named shapes carry the published configs; a
// random model written at a shape (tiny, SmolLM2-135M, and tiny Qwen2/Qwen3 variants)
// loads through the normal path with exactly that config, the expected tensors and a
// tokenizer that round-trips any bytes; its logits are finite; the same seed writes the
// same bytes. The streaming GGUF writer is checked byte for byte against GgufWriter.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "oscar/core/dtype.h"
#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/formats/gguf.h"
#include "oscar/formats/gguf_stream_writer.h"
#include "oscar/model/model_shapes.h"
#include "oscar/model/transformer.h"
#include "oscar/model/weight_source.h"
#include "oscar/text/byte_level.h"
#include "oscar/text/chat_template.h"
#include "oscar/text/tokenizer.h"

namespace oscar {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() : path(fs::temp_directory_path() / ("oscar_make_model_" + std::to_string(::getpid()))) {
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t n_elements(const std::vector<uint64_t>& ne) {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  return n;
}

// Every field gguf_model_config reads back must equal the shape's.
void expect_config(const ModelConfig& got, const ModelConfig& want) {
  EXPECT_EQ(got.arch, want.arch);
  EXPECT_EQ(got.n_layers, want.n_layers);
  EXPECT_EQ(got.n_embd, want.n_embd);
  EXPECT_EQ(got.n_ff, want.n_ff);
  EXPECT_EQ(got.n_heads, want.n_heads);
  EXPECT_EQ(got.n_kv_heads, want.n_kv_heads);
  EXPECT_EQ(got.head_dim, want.head_dim);
  EXPECT_EQ(got.n_vocab, want.n_vocab);
  EXPECT_EQ(got.n_ctx_train, want.n_ctx_train);
  EXPECT_EQ(got.rms_eps, want.rms_eps);
  EXPECT_EQ(got.rope_theta, want.rope_theta);
  EXPECT_EQ(got.rope_style, want.rope_style);
  EXPECT_EQ(got.rope_scaling.type, "none");
  EXPECT_EQ(got.tied_embeddings, want.tied_embeddings);
  EXPECT_EQ(got.qkv_bias, want.qkv_bias);
  EXPECT_EQ(got.qk_norm, want.qk_norm);
}

// The file's tensor table is random_model_tensors(config), in order, with those types.
void expect_tensors(const gguf::GgufFile& f, const ModelConfig& c) {
  const std::vector<RandomTensor> want = random_model_tensors(c);
  ASSERT_EQ(f.tensors().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const gguf::TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, want[i].name);
    EXPECT_EQ(t.type, want[i].type) << t.name;
    EXPECT_EQ(t.ne, want[i].ne) << t.name;
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
  }
}

// Values of a written tensor: norms exactly 1; uniform ones inside ±range, centred, with
// the uniform distribution's spread (std = range / √3), and not two equal halves.
void expect_values(const gguf::GgufFile& f, const RandomTensor& rt) {
  const std::vector<float> x = f.dequantize(f.tensor(rt.name));
  if (rt.fill == RandomTensor::Fill::ones) {
    for (float v : x) ASSERT_EQ(v, 1.0f) << rt.name;
    return;
  }
  double sum = 0, sum2 = 0;
  for (float v : x) {
    ASSERT_LE(std::abs(v), rt.range * 1.004f) << rt.name;  // bf16 rounding may step just past
    sum += v;
    sum2 += double(v) * v;
  }
  const double n = double(x.size()), mean = sum / n, std = std::sqrt(sum2 / n - mean * mean);
  const double want_std = rt.range / std::sqrt(3.0);
  EXPECT_LT(std::abs(mean), 5 * want_std / std::sqrt(n)) << rt.name;
  EXPECT_NEAR(std, want_std, want_std * (0.02 + 5 / std::sqrt(n))) << rt.name;
  EXPECT_NE(std::memcmp(x.data(), x.data() + x.size() / 2, x.size() / 2 * sizeof(float)), 0) << rt.name;
}

ModelShape tiny_variant(Arch arch) {
  ModelShape s = find_model_shape("tiny");
  s.name = std::string("tiny-") + arch_name(arch);
  s.config.arch = arch;
  s.config.rope_style = RopeStyle::neox;
  s.tokenizer_pre = "qwen2";
  if (arch == Arch::qwen2) {
    s.config.qkv_bias = true;
    s.config.tied_embeddings = true;
  } else {
    s.config.qk_norm = true;
    s.config.head_dim = 32;  // Qwen3 sets head_dim apart from n_embd / n_heads
  }
  return s;
}

std::vector<float> last_logits(const ModelWeights& w, const std::vector<int32_t>& ids) {
  Transformer t(w);
  t.configure_kv(KvSpec{});
  KvCache cache = t.make_cache(64);
  const SeqId seq = cache.add_sequence();
  std::vector<float> logits;
  t.forward(cache, seq, ids, LogitsFor::last, logits);
  return logits;
}

void expect_finite_and_varied(const std::vector<float>& logits, int n_vocab) {
  ASSERT_EQ(logits.size(), size_t(n_vocab));
  float lo = INFINITY, hi = -INFINITY;
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v));
    lo = std::min(lo, v), hi = std::max(hi, v);
  }
  EXPECT_GT(hi - lo, 1e-3f);
}

TEST(ModelShapes, PublishedConfigs) {
  const ModelConfig& q = find_model_shape("qwen3-8b").config;
  EXPECT_EQ(q.arch, Arch::qwen3);
  EXPECT_EQ(q.n_layers, 36);
  EXPECT_EQ(q.n_embd, 4096);
  EXPECT_EQ(q.n_ff, 12288);
  EXPECT_EQ(q.n_heads, 32);
  EXPECT_EQ(q.n_kv_heads, 8);
  EXPECT_EQ(q.head_dim, 128);
  EXPECT_EQ(q.n_vocab, 151936);
  EXPECT_EQ(q.n_ctx_train, 40960);
  EXPECT_EQ(q.rope_theta, 1e6f);
  EXPECT_EQ(q.rms_eps, 1e-6f);
  EXPECT_TRUE(q.qk_norm);
  EXPECT_FALSE(q.qkv_bias);
  EXPECT_FALSE(q.tied_embeddings);
  EXPECT_EQ(q.rope_style, RopeStyle::neox);

  const ModelConfig& l = find_model_shape("llama3-8b").config;
  EXPECT_EQ(l.n_ff, 14336);
  EXPECT_EQ(l.n_vocab, 128256);
  EXPECT_EQ(l.rope_theta, 500000.0f);
  EXPECT_EQ(l.rope_style, RopeStyle::interleaved);
  const ModelConfig& q2 = find_model_shape("qwen2.5-1.5b").config;
  EXPECT_TRUE(q2.qkv_bias && q2.tied_embeddings && !q2.qk_norm);
  EXPECT_EQ(q2.n_kv_heads, 2);
  EXPECT_EQ(q2.n_ctx_train, 32768);
  const ModelConfig& s = find_model_shape("smollm2-135m").config;
  EXPECT_EQ(s.n_heads, 9);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_TRUE(s.tied_embeddings);

  std::set<std::string> names;
  for (const ModelShape& shape : model_shapes()) {
    EXPECT_TRUE(names.insert(shape.name).second) << shape.name;
    EXPECT_NO_THROW(shape.config.validate()) << shape.name;
    EXPECT_TRUE(find_pre_type(shape.tokenizer_pre).has_value()) << shape.name;
  }
  try {
    find_model_shape("qwen9");
    FAIL() << "no error for an unknown shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'qwen9'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("qwen3-8b, llama3-8b"), std::string::npos) << e.what();
  }
}

// Tensor counts of the llama.cpp conversions of the real models, and their parameter
// counts (Qwen3-8B: 8.19 B, Llama-3-8B: 8.03 B).
TEST(ModelShapes, TensorTablesMatchTheRealModels) {
  struct Want {
    const char* shape;
    size_t n_tensors;
    uint64_t n_params;
  };
  for (const Want& w : {Want{"qwen3-32b", 707, 32762123264}, Want{"qwen3-8b", 399, 8190735360}, Want{"llama3-8b", 291, 8030261248},
                        Want{"qwen2.5-1.5b", 338, 1543714304}, Want{"smollm2-135m", 272, 134515008}}) {
    const std::vector<RandomTensor> ts = random_model_tensors(find_model_shape(w.shape).config);
    uint64_t n = 0;
    for (const RandomTensor& t : ts) n += n_elements(t.ne);
    EXPECT_EQ(ts.size(), w.n_tensors) << w.shape;
    EXPECT_EQ(n, w.n_params) << w.shape;
  }
  const std::vector<RandomTensor> q = random_model_tensors(find_model_shape("qwen3-8b").config);
  auto find = [&](const std::string& name) -> const RandomTensor& {
    for (const RandomTensor& t : q)
      if (t.name == name) return t;
    throw Error("no tensor " + name);
  };
  EXPECT_EQ(find("blk.35.attn_q.weight").ne, (std::vector<uint64_t>{4096, 4096}));
  EXPECT_EQ(find("blk.35.attn_k.weight").ne, (std::vector<uint64_t>{4096, 1024}));
  EXPECT_EQ(find("blk.0.attn_k_norm.weight").ne, (std::vector<uint64_t>{128}));
  EXPECT_EQ(find("blk.0.attn_k_norm.weight").type, GgmlType::f32);
  EXPECT_EQ(find("blk.0.ffn_down.weight").ne, (std::vector<uint64_t>{12288, 4096}));
  EXPECT_FLOAT_EQ(find("blk.0.ffn_down.weight").range, 1.0f / std::sqrt(12288.0f));
  EXPECT_EQ(find("output.weight").ne, (std::vector<uint64_t>{4096, 151936}));
  EXPECT_EQ(find("output.weight").type, GgmlType::bf16);
}

TEST(MakeModel, TinyLoadsAsTheShape) {
  TempDir dir;
  const ModelShape& shape = find_model_shape("tiny");
  const std::string path = dir.file("tiny.gguf");
  const RandomModelStats stats = write_random_model(shape, path, 1);
  EXPECT_EQ(stats.file_bytes, fs::file_size(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const auto src = open_weight_source(path);
  expect_config(src->config(), shape.config);
  EXPECT_EQ(src->config().name, "random tiny");
  const gguf::GgufFile f = gguf::GgufFile::open(path);
  expect_tensors(f, shape.config);
  EXPECT_EQ(stats.n_tensors, f.tensors().size());
  for (const RandomTensor& t : random_model_tensors(shape.config)) expect_values(f, t);

  const ModelWeights w = load_model_weights(*src);
  EXPECT_EQ(w.layers.size(), 2u);
  EXPECT_FALSE(w.output.empty());
  EXPECT_EQ(detect_chat_template(f.get_string("tokenizer.chat_template"), "llama"), ChatTemplateKind::chatml);
}

// Q8_0 matrices: the BF16 file's values quantized (each within half a step of its block's
// scale, plus the fp16 scale's and BF16's rounding), norms and biases unchanged, half the bytes.
TEST(MakeModel, Q8_0MatricesAreTheBf16ValuesQuantized) {
  TempDir dir;
  const ModelShape& shape = find_model_shape("tiny");
  const std::string bf16_path = dir.file("bf16.gguf"), q8_path = dir.file("q8.gguf");
  const RandomModelStats s16 = write_random_model(shape, bf16_path, 4);
  const RandomModelStats s8 = write_random_model(shape, q8_path, 4, GgmlType::q8_0);
  EXPECT_EQ(s8.n_params, s16.n_params);
  EXPECT_LT(s8.file_bytes, s16.file_bytes);
  const gguf::GgufFile f16 = gguf::GgufFile::open(bf16_path), f8 = gguf::GgufFile::open(q8_path);
  for (const RandomTensor& t : random_model_tensors(shape.config, GgmlType::q8_0)) {
    const std::vector<float> a = f16.dequantize(f16.tensor(t.name)), b = f8.dequantize(f8.tensor(t.name));
    ASSERT_EQ(a.size(), b.size()) << t.name;
    if (t.type != GgmlType::q8_0) {
      EXPECT_EQ(a, b) << t.name;
      continue;
    }
    EXPECT_EQ(f8.tensor(t.name).type, GgmlType::q8_0);
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_LE(std::abs(a[i] - b[i]), t.range * (0.5f / 127.0f + 0x1p-11f + 0x1p-8f) * 1.01f) << t.name << " " << i;
  }
  EXPECT_THROW(random_model_tensors(shape.config, GgmlType::q4_k), Error);
}

// quantize_q8_0 against its definition: d = max|x| / 127 (fp16), q = round(x / d); a zero
// block stays zero; a whole number of blocks or a check failure.
TEST(MakeModel, QuantizeQ8_0) {
  std::vector<float> x(96);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.7f) * (i < 32 ? 0.0f : float(i) / 10.0f);
  std::vector<uint8_t> q(3 * 34);
  quantize_q8_0(x.data(), q.data(), 96);
  std::vector<float> y(96);
  dequantize_row(GgmlType::q8_0, q.data(), y.data(), 96);
  for (int b = 0; b < 3; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[size_t(b * 32 + j)]));
    const float d = fp16_to_f32(f32_to_fp16(amax / 127.0f));
    for (int j = 0; j < 32; ++j) {
      const size_t i = size_t(b * 32 + j);
      if (amax == 0.0f) ASSERT_EQ(y[i], 0.0f);
      else ASSERT_LE(std::abs(y[i] - x[i]), d * 0.5f + amax * 1e-3f) << i;
    }
  }
  EXPECT_ANY_THROW(quantize_q8_0(x.data(), q.data(), 33));
}

TEST(MakeModel, SmolLM2ShapeLoads) {
  TempDir dir;
  const ModelShape& shape = find_model_shape("smollm2-135m");
  const std::string path = dir.file("smollm2.gguf");
  write_random_model(shape, path, 0);
  const auto src = open_weight_source(path);
  expect_config(src->config(), shape.config);
  const gguf::GgufFile f = gguf::GgufFile::open(path);
  expect_tensors(f, shape.config);
  EXPECT_EQ(f.tensors().size(), 272u);
  const ModelWeights w = load_model_weights(*src);
  EXPECT_TRUE(w.output.empty());  // tied
  EXPECT_EQ(w.token_embd.rows(), 49152);
  EXPECT_EQ(w.token_embd.cols(), 576);

  const Tokenizer tok(tokenizer_data_from_gguf(f));
  EXPECT_EQ(tok.n_vocab(), 49152);
  const std::string text = "The quick brown fox jumps over the lazy dog, 12 times.";
  const std::vector<int32_t> ids = tok.encode(text, false, false);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_LT(ids.size(), text.size() / 2) << "merges should make a few letters per token";
}

// Qwen2 (QKV bias, tied) and Qwen3 (q/k norm, head_dim ≠ n_embd / n_heads) at tiny sizes:
// the arch-specific tensors, NeoX RoPE, <|im_end|> as eos, and a forward pass.
TEST(MakeModel, QwenArchitecturesLoadAndRun) {
  TempDir dir;
  for (Arch arch : {Arch::qwen2, Arch::qwen3}) {
    SCOPED_TRACE(arch_name(arch));
    const ModelShape shape = tiny_variant(arch);
    const std::string path = dir.file(shape.name + ".gguf");
    write_random_model(shape, path, 3);
    const auto src = open_weight_source(path);
    expect_config(src->config(), shape.config);
    const gguf::GgufFile f = gguf::GgufFile::open(path);
    expect_tensors(f, shape.config);
    for (const RandomTensor& t : random_model_tensors(shape.config)) expect_values(f, t);

    const Tokenizer tok(tokenizer_data_from_gguf(f));
    EXPECT_EQ(tok.token_to_piece(tok.eos_id()), "<|im_end|>");
    const ModelWeights w = load_model_weights(*src);
    expect_finite_and_varied(last_logits(w, tok.encode("hello qwen", false, false)), shape.config.n_vocab);
  }
}

TEST(MakeModel, SameSeedSameBytes) {
  TempDir dir;
  const ModelShape& shape = find_model_shape("tiny");
  write_random_model(shape, dir.file("a.gguf"), 7);
  set_num_threads(1);  // values must not depend on how the chunks are split
  write_random_model(shape, dir.file("b.gguf"), 7);
  set_num_threads(0);
  write_random_model(shape, dir.file("c.gguf"), 8);
  const std::string a = read_bytes(dir.file("a.gguf")), b = read_bytes(dir.file("b.gguf"));
  const std::string c = read_bytes(dir.file("c.gguf"));
  EXPECT_TRUE(a == b);
  ASSERT_EQ(a.size(), c.size());
  const gguf::GgufFile fa = gguf::GgufFile::parse(reinterpret_cast<const uint8_t*>(a.data()), a.size(), "a");
  const gguf::GgufFile fc = gguf::GgufFile::parse(reinterpret_cast<const uint8_t*>(c.data()), c.size(), "c");
  EXPECT_EQ(a.substr(0, fa.data_offset()), c.substr(0, fc.data_offset())) << "metadata does not depend on the seed";
  for (const RandomTensor& t : random_model_tensors(shape.config)) {
    const gguf::TensorInfo &ta = fa.tensor(t.name), &tc = fc.tensor(t.name);
    const bool same = std::memcmp(ta.data, tc.data, ta.n_bytes) == 0;
    EXPECT_EQ(same, t.fill == RandomTensor::Fill::ones) << t.name;
  }
  // Distinct tensors of one file get distinct streams.
  EXPECT_NE(std::memcmp(fa.tensor("blk.0.ffn_gate.weight").data, fa.tensor("blk.0.ffn_up.weight").data,
                        fa.tensor("blk.0.ffn_up.weight").n_bytes),
            0);
}

TEST(MakeModel, TokenizerRoundTripsAnyBytes) {
  TempDir dir;
  const std::string path = dir.file("tiny.gguf");
  write_random_model(find_model_shape("tiny"), path, 0);
  const gguf::GgufFile f = gguf::GgufFile::open(path);
  const TokenizerData d = tokenizer_data_from_gguf(f);
  for (int b = 0; b < 256; ++b) ASSERT_EQ(d.tokens[size_t(b)], byte_level::byte_to_text(uint8_t(b))) << "byte " << b;
  const Tokenizer tok(d);
  EXPECT_EQ(tok.n_vocab(), 512);
  for (int b = 0; b < 256; ++b) EXPECT_TRUE(tok.can_encode_byte(uint8_t(b))) << b;

  const std::string text = std::string("Hello, wörld! 日本語 ") + "\x01\x7f\x80\xff" + " tab\tnew\nline  end";
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.decode(tok.encode(text, tok.add_bos(), false)), text);
  EXPECT_LT(tok.encode(" hello world", false, false).size(), 12u);

  const std::vector<int32_t> chat = tok.encode("<|im_start|>user\nhi<|im_end|>", false, true);
  ASSERT_GE(chat.size(), 3u);
  EXPECT_EQ(tok.token_to_piece(chat.front()), "<|im_start|>");
  EXPECT_EQ(tok.token_type(chat.front()), TokenType::control);
  EXPECT_TRUE(tok.is_eog(chat.back()));
  EXPECT_EQ(tok.token_to_piece(tok.eos_id()), "<|endoftext|>");
  EXPECT_TRUE(tok.is_eog(tok.eos_id()));
}

TEST(MakeModel, TinyForwardGivesFiniteLogits) {
  TempDir dir;
  const std::string path = dir.file("tiny.gguf");
  write_random_model(find_model_shape("tiny"), path, 0);
  const Tokenizer tok(tokenizer_data_from_gguf(gguf::GgufFile::open(path)));
  const ModelWeights w = load_model_weights(*open_weight_source(path));
  const std::vector<int32_t> ids = tok.encode("hello there, tiny model", false, false);
  ASSERT_GE(ids.size(), 4u);
  expect_finite_and_varied(last_logits(w, ids), 512);
}

TEST(MakeModel, ErrorsLeaveNoFile) {
  TempDir dir;
  ModelShape shape = find_model_shape("tiny");
  const std::string missing_dir = dir.file("no/such/dir/m.gguf");
  EXPECT_THROW(write_random_model(shape, missing_dir, 0), Error);
  EXPECT_THROW(write_random_model(shape, dir.path.string(), 0), Error);  // a directory
  shape.config.n_vocab = k_random_vocab_min - 1;
  EXPECT_THROW(write_random_model(shape, dir.file("small.gguf"), 0), Error);
  shape.config.n_vocab = k_random_vocab_min;  // the smallest vocabulary still loads
  write_random_model(shape, dir.file("min.gguf"), 0);
  EXPECT_EQ(open_weight_source(dir.file("min.gguf"))->config().n_vocab, k_random_vocab_min);
  EXPECT_NO_THROW(Tokenizer(tokenizer_data_from_gguf(gguf::GgufFile::open(dir.file("min.gguf")))));
  size_t n_files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) n_files += e.path().filename() != "min.gguf";
  EXPECT_EQ(n_files, 0u);
}

// The stream writer's file equals GgufWriter's for the same metadata and tensors, with
// data fed in uneven pieces and sizes that need padding.
TEST(GgufStreamWriter, SameBytesAsGgufWriter) {
  TempDir dir;
  std::vector<uint8_t> a(3 * 4), b(5 * 7 * 2), c(64);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(i * 7 + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 13 + 5);
  for (size_t i = 0; i < c.size(); ++i) c[i] = uint8_t(255 - i);
  gguf::Value ints;
  ints.type = gguf::ValueType::array;
  ints.elem_type = gguf::ValueType::i32;
  for (int32_t v : {1, -2, 3}) {
    gguf::Value e;
    e.type = gguf::ValueType::i32;
    e.i = v;
    ints.array.push_back(e);
  }

  gguf::GgufWriter ref;
  ref.set_string("general.architecture", "llama");
  ref.set_u32("llama.block_count", 3);
  ref.set_f32("x.eps", 1e-6f);
  ref.set_bool("x.flag", true);
  ref.set_string_array("x.tokens", {"a", "", "ĠĠ"});
  ref.set("x.types", ints);
  ref.add_tensor("a", GgmlType::f32, {3}, a);
  ref.add_tensor("b", GgmlType::bf16, {5, 7}, b);
  ref.add_tensor("c", GgmlType::f32, {4, 2, 2}, c);

  gguf::GgufStreamWriter w(dir.file("s.gguf"));
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 3);
  w.set_f32("x.eps", 1e-6f);
  w.set_bool("x.flag", true);
  w.set_string_array("x.tokens", {"a", "", "ĠĠ"});
  w.set_i32_array("x.types", {1, -2, 3});
  EXPECT_EQ(w.add_tensor("a", GgmlType::f32, {3}), a.size());
  EXPECT_EQ(w.add_tensor("b", GgmlType::bf16, {5, 7}), b.size());
  EXPECT_EQ(w.add_tensor("c", GgmlType::f32, {4, 2, 2}), c.size());
  EXPECT_THROW(w.add_tensor("a", GgmlType::f32, {1}), Error);
  EXPECT_THROW(w.add_tensor("z", GgmlType::f32, {0}), Error);
  EXPECT_EQ(w.data_bytes(), a.size() + b.size() + c.size());
  w.begin();
  EXPECT_THROW(w.set_u32("late", 1), Error);
  w.write_data(a.data(), 5);
  w.write_data(a.data() + 5, 7);
  EXPECT_THROW(w.write_data(b.data(), b.size() + 1), Error) << "a piece may not cross into the next tensor";
  for (size_t i = 0; i < b.size(); i += 9) w.write_data(b.data() + i, std::min<size_t>(9, b.size() - i));
  w.write_data(c.data(), c.size());
  EXPECT_THROW(w.write_data(c.data(), 1), Error);
  w.finish();
  const std::vector<uint8_t> want = ref.to_bytes();
  EXPECT_TRUE(read_bytes(dir.file("s.gguf")) == std::string(want.begin(), want.end()));
}

TEST(GgufStreamWriter, UnfinishedWriterLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("u.gguf");
  {
    gguf::GgufStreamWriter w(path);
    w.set_string("general.architecture", "llama");
    w.add_tensor("a", GgmlType::f32, {4});
    w.begin();
    const float x[2] = {1, 2};
    w.write_data(x, sizeof x);
    EXPECT_THROW(w.finish(), Error);
    EXPECT_TRUE(fs::exists(path + ".tmp"));
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace oscar
