// Shapes are the published config.json values of each model, as llama.cpp's converter
// writes them to GGUF. Random values come from splitmix64's output function applied to
// a counter, so any chunk of any tensor can be generated on its own, in parallel.
#include "oscar/model/model_shapes.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "oscar/core/dtype.h"
#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/formats/gguf_stream_writer.h"

namespace oscar {
namespace {

// One row per shape: the config.json values of the real model (tiny: none, for tests).
struct ShapeRow {
  const char* name;
  Arch arch;
  int n_layers, n_embd, n_ff, n_heads, n_kv_heads, head_dim, n_vocab, n_ctx_train;
  float rms_eps, rope_theta;
  bool tied_embeddings, qkv_bias, qk_norm;
  const char* tokenizer_pre;
};

constexpr ShapeRow k_rows[] = {
    // name          arch         layers  embd     ff heads kv  hd   vocab    ctx   eps   theta   tied   bias   qk_norm
    {"qwen3-32b",    Arch::qwen3,     64, 5120, 25600,  64,  8, 128, 151936, 40960, 1e-6f, 1e6f,  false, false, true,  "qwen2"},
    {"qwen3-8b",     Arch::qwen3,     36, 4096, 12288,  32,  8, 128, 151936, 40960, 1e-6f, 1e6f,  false, false, true,  "qwen2"},
    {"llama3-8b",    Arch::llama,     32, 4096, 14336,  32,  8, 128, 128256,  8192, 1e-5f, 5e5f,  false, false, false, "llama-bpe"},
    {"qwen2.5-1.5b", Arch::qwen2,     28, 1536,  8960,  12,  2, 128, 151936, 32768, 1e-6f, 1e6f,  true,  true,  false, "qwen2"},
    {"smollm2-135m", Arch::llama,     30,  576,  1536,   9,  3,  64,  49152,  8192, 1e-5f, 1e5f,  true,  false, false, "smollm"},
    // Not a real model: the smallest file that takes every path (untied output, GQA).
    {"tiny",         Arch::llama,      2,   64,    96,   4,  2,  16,    512,  2048, 1e-5f, 1e4f,  false, false, false, "smollm"},
};

std::vector<ModelShape> build_shapes() {
  std::vector<ModelShape> shapes;
  for (const ShapeRow& r : k_rows) {
    ModelShape s;
    s.name = r.name;
    ModelConfig& c = s.config;
    c.arch = r.arch;
    c.n_layers = r.n_layers, c.n_embd = r.n_embd, c.n_ff = r.n_ff;
    c.n_heads = r.n_heads, c.n_kv_heads = r.n_kv_heads, c.head_dim = r.head_dim;
    c.n_vocab = r.n_vocab, c.n_ctx_train = r.n_ctx_train;
    c.rms_eps = r.rms_eps, c.rope_theta = r.rope_theta;
    // What gguf_model_config derives from the architecture (llama.cpp permutes Llama Q/K).
    c.rope_style = r.arch == Arch::llama ? RopeStyle::interleaved : RopeStyle::neox;
    c.tied_embeddings = r.tied_embeddings, c.qkv_bias = r.qkv_bias, c.qk_norm = r.qk_norm;
    c.validate();
    s.tokenizer_pre = r.tokenizer_pre;
    shapes.push_back(std::move(s));
  }
  return shapes;
}

// ---- random values ----

constexpr uint64_t k_golden = 0x9E3779B97F4A7C15ull;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One stream per (seed, tensor name): FNV-1a of the name, mixed with the seed.
uint64_t tensor_key(uint64_t seed, const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return mix64(h ^ mix64(seed + k_golden));
}

// Elements [first, first + n) of a tensor's stream, uniform in (−range, range): the hash
// of counter j gives elements 2j (low half) and 2j + 1 (high half), 24 bits each.
template <typename Store>
void fill_uniform(uint64_t key, uint64_t first, int64_t n, float range, Store store) {
  const float scale = range * 0x1p-23f, offset = 0.5f * scale - range;  // u·scale + offset in (−range, range)
  auto value = [&](uint32_t bits) { return float(bits >> 8) * scale + offset; };
  auto hash = [&](int64_t i) { return mix64(key + ((first + uint64_t(i)) >> 1) * k_golden); };
  int64_t i = 0;
  if ((first & 1) != 0 && n > 0) store(i++, value(uint32_t(hash(0) >> 32)));
  for (; i + 1 < n; i += 2) {
    const uint64_t h = hash(i);
    store(i, value(uint32_t(h)));
    store(i + 1, value(uint32_t(h >> 32)));
  }
  if (i < n) store(i, value(uint32_t(hash(i))));
}

}  // namespace

void quantize_q8_0(const float* x, uint8_t* out, int64_t n) {
  OSCAR_CHECK(n % 32 == 0, "quantize_q8_0: {} elements are not whole blocks of 32", n);
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dbits = f32_to_fp16(d).bits;
    std::memcpy(out, &dbits, 2);
    for (int j = 0; j < 32; ++j) out[2 + j] = uint8_t(int8_t(std::lround(x[j] * id)));
  }
}

namespace {

// Generates one tensor in chunks on the default pool and streams it to `out`.
void write_tensor(gguf::GgufStreamWriter& out, const RandomTensor& t, uint64_t seed, std::vector<uint8_t>& buf) {
  constexpr int64_t chunk = int64_t(1) << 22;  // elements: 8 MiB of BF16, 16 MiB of F32 (a multiple of 32)
  const bool uniform = t.fill == RandomTensor::Fill::uniform;
  const bool bf16_matrix = t.type == GgmlType::bf16 && uniform, q8_matrix = t.type == GgmlType::q8_0 && uniform;
  OSCAR_CHECK(bf16_matrix || q8_matrix || t.type == GgmlType::f32, "tensor '{}': no generator for {}", t.name,
              ggml_type_name(t.type));
  uint64_t n = 1;
  for (uint64_t d : t.ne) n *= d;
  const uint64_t key = tensor_key(seed, t.name);
  // Bytes of m elements (q8_0: blocks of 32 elements in 34 bytes).
  auto bytes_of = [&](int64_t m) { return size_t(q8_matrix ? m / 32 * 34 : m * (bf16_matrix ? 2 : 4)); };
  buf.resize(bytes_of(int64_t(std::min<uint64_t>(n, chunk))));
  for (uint64_t first = 0; first < n; first += chunk) {
    const int64_t m = int64_t(std::min<uint64_t>(chunk, n - first));
    default_pool().parallel_for(m, 1 << 14, [&](int64_t b, int64_t e) {
      if (q8_matrix) {
        std::vector<float> x(size_t(e - b));
        fill_uniform(key, first + uint64_t(b), e - b, t.range, [&](int64_t i, float v) { x[size_t(i)] = v; });
        quantize_q8_0(x.data(), buf.data() + bytes_of(b), e - b);
      } else if (bf16_matrix) {
        uint16_t* dst = reinterpret_cast<uint16_t*>(buf.data()) + b;
        fill_uniform(key, first + uint64_t(b), e - b, t.range, [&](int64_t i, float x) { dst[i] = f32_to_bf16(x).bits; });
      } else if (t.fill == RandomTensor::Fill::ones) {
        float* dst = reinterpret_cast<float*>(buf.data()) + b;
        std::fill(dst, dst + (e - b), 1.0f);
      } else {
        float* dst = reinterpret_cast<float*>(buf.data()) + b;
        fill_uniform(key, first + uint64_t(b), e - b, t.range, [&](int64_t i, float x) { dst[i] = x; });
      }
    });
    out.write_data(buf.data(), bytes_of(m));
  }
}

// ---- tokenizer ----

// GPT-2's bytes_to_unicode, as oscar/text/byte_level.cpp has it (the model component
// does not link the text one; a test checks the two agree): printable Latin-1 bytes
// stand for themselves, the other 68 move, in byte order, to U+0100 and up.
std::array<std::string, 256> byte_level_alphabet() {
  std::array<std::string, 256> text;
  uint32_t next_moved = 256;
  for (int b = 0; b < 256; ++b) {
    const bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = self ? uint32_t(b) : next_moved++;
    if (cp < 0x80) {
      text[b] = std::string(1, char(cp));
    } else {  // below U+0800: two bytes
      text[b] = {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    }
  }
  return text;
}

struct RandomVocab {
  std::vector<std::string> tokens;  // [n_vocab] byte-level text
  std::vector<int32_t> types;       // [n_vocab] 1 normal, 3 control
  std::vector<std::string> merges;  // one per word token: words starting with Ġ first, shortest first
  int32_t endoftext = -1, im_end = -1;
};

// Words over [Ġa-z] (Ġ is the space byte, and only ever leads, as the pre-tokenizers
// split) grown one letter at a time in breadth-first order, each made by the merge
// "word letter", so every merge names tokens that exist. The merges of words that start
// with Ġ rank first: BPE then grows " quick" from the left (Ġq, Ġqu, Ġqui, ...) instead
// of stopping at pairs, and English-ish text encodes to about three bytes per token.
RandomVocab random_vocab(int n_vocab) {
  if (n_vocab < k_random_vocab_min || n_vocab > (1 << 24))
    fail("random model: vocabulary of {} tokens (must be {} .. {})", n_vocab, k_random_vocab_min, 1 << 24);
  RandomVocab v;
  const std::array<std::string, 256> bytes = byte_level_alphabet();
  v.tokens.assign(bytes.begin(), bytes.end());
  const size_t n_normal = size_t(n_vocab) - 3;
  std::vector<std::string> words = {bytes[' ']};
  for (char c = 'a'; c <= 'z'; ++c) words.emplace_back(1, c);
  for (size_t next = 0; v.tokens.size() < n_normal; ++next) {
    const std::string prefix = words[next];
    for (char c = 'a'; c <= 'z' && v.tokens.size() < n_normal; ++c) {
      words.push_back(prefix + c);
      v.tokens.push_back(prefix + c);
      v.merges.push_back(prefix + ' ' + c);
    }
  }
  std::stable_partition(v.merges.begin(), v.merges.end(), [&](const std::string& m) { return m.starts_with(bytes[' ']); });
  v.types.assign(n_normal, 1);
  v.endoftext = int32_t(v.tokens.size());
  v.im_end = v.endoftext + 2;  // after <|im_start|>
  for (const char* control : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.tokens.emplace_back(control);
    v.types.push_back(3);
  }
  return v;
}

// A ChatML template (the family detect_chat_template recognises by "<|im_start|>").
constexpr const char* k_chatml_template =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

void set_metadata(gguf::GgufStreamWriter& w, const ModelShape& shape) {
  const ModelConfig& c = shape.config;
  const std::string a = arch_name(c.arch);
  w.set_string("general.architecture", a);
  w.set_string("general.name", "random " + shape.name);
  w.set_u32(a + ".block_count", uint32_t(c.n_layers));
  w.set_u32(a + ".context_length", uint32_t(c.n_ctx_train));
  w.set_u32(a + ".embedding_length", uint32_t(c.n_embd));
  w.set_u32(a + ".feed_forward_length", uint32_t(c.n_ff));
  w.set_u32(a + ".attention.head_count", uint32_t(c.n_heads));
  w.set_u32(a + ".attention.head_count_kv", uint32_t(c.n_kv_heads));
  w.set_u32(a + ".attention.key_length", uint32_t(c.head_dim));
  w.set_u32(a + ".attention.value_length", uint32_t(c.head_dim));
  w.set_f32(a + ".rope.freq_base", c.rope_theta);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", c.rms_eps);

  const RandomVocab v = random_vocab(c.n_vocab);
  const bool qwen = c.arch == Arch::qwen2 || c.arch == Arch::qwen3;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", shape.tokenizer_pre);
  w.set_string_array("tokenizer.ggml.tokens", v.tokens);
  w.set_i32_array("tokenizer.ggml.token_type", v.types);
  w.set_string_array("tokenizer.ggml.merges", v.merges);
  w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(v.endoftext));
  w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(qwen ? v.im_end : v.endoftext));
  w.set_u32("tokenizer.ggml.padding_token_id", uint32_t(v.endoftext));
  // Explicit: "llama-bpe" would otherwise default to adding a BOS.
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_string("tokenizer.chat_template", k_chatml_template);
}

}  // namespace

const std::vector<ModelShape>& model_shapes() {
  static const std::vector<ModelShape> shapes = build_shapes();
  return shapes;
}

std::string known_model_shapes() {
  std::string out;
  for (const ModelShape& s : model_shapes()) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

const ModelShape& find_model_shape(std::string_view name) {
  for (const ModelShape& s : model_shapes())
    if (s.name == name) return s;
  fail("unknown model shape '{}' (known: {})", name, known_model_shapes());
}

std::vector<RandomTensor> random_model_tensors(const ModelConfig& c, GgmlType matrix_type) {
  if (matrix_type != GgmlType::bf16 && matrix_type != GgmlType::q8_0)
    fail("random model: matrices can be BF16 or Q8_0, not {}", ggml_type_name(matrix_type));
  using Fill = RandomTensor::Fill;
  const uint64_t E = uint64_t(c.n_embd), F = uint64_t(c.n_ff), V = uint64_t(c.n_vocab), hd = uint64_t(c.head_dim);
  const uint64_t qd = uint64_t(c.n_heads) * hd, kvd = uint64_t(c.n_kv_heads) * hd;
  constexpr float bias_range = 0.02f;
  std::vector<RandomTensor> ts;
  auto matrix = [&](std::string name, uint64_t n_in, uint64_t n_out) {
    ts.push_back({std::move(name), matrix_type, {n_in, n_out}, Fill::uniform, 1.0f / std::sqrt(float(n_in))});
  };
  auto norm = [&](std::string name, uint64_t n) { ts.push_back({std::move(name), GgmlType::f32, {n}, Fill::ones, 0.0f}); };
  auto bias = [&](std::string name, uint64_t n) {
    ts.push_back({std::move(name), GgmlType::f32, {n}, Fill::uniform, bias_range});
  };
  matrix("token_embd.weight", E, V);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    norm(p + "attn_norm.weight", E);
    matrix(p + "attn_q.weight", E, qd);
    matrix(p + "attn_k.weight", E, kvd);
    matrix(p + "attn_v.weight", E, kvd);
    if (c.qkv_bias) {
      bias(p + "attn_q.bias", qd);
      bias(p + "attn_k.bias", kvd);
      bias(p + "attn_v.bias", kvd);
    }
    if (c.qk_norm) {
      norm(p + "attn_q_norm.weight", hd);
      norm(p + "attn_k_norm.weight", hd);
    }
    matrix(p + "attn_output.weight", qd, E);
    norm(p + "ffn_norm.weight", E);
    matrix(p + "ffn_gate.weight", E, F);
    matrix(p + "ffn_up.weight", E, F);
    matrix(p + "ffn_down.weight", F, E);
  }
  norm("output_norm.weight", E);
  if (!c.tied_embeddings) matrix("output.weight", E, V);
  return ts;
}

RandomModelStats write_random_model(const ModelShape& shape, const std::string& path, uint64_t seed,
                                    GgmlType matrix_type) {
  shape.config.validate();
  const std::vector<RandomTensor> tensors = random_model_tensors(shape.config, matrix_type);
  gguf::GgufStreamWriter w(path);
  set_metadata(w, shape);
  RandomModelStats stats;
  for (const RandomTensor& t : tensors) {
    w.add_tensor(t.name, t.type, t.ne);
    uint64_t n = 1;
    for (uint64_t d : t.ne) n *= d;
    stats.n_params += n;
  }
  stats.n_tensors = tensors.size();
  w.begin();
  std::vector<uint8_t> buf;
  for (const RandomTensor& t : tensors) write_tensor(w, t, seed, buf);
  w.finish();
  stats.file_bytes = w.bytes_written();
  return stats;
}

}  // namespace oscar
