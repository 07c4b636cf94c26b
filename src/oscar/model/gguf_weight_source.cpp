#include "oscar/model/gguf_weight_source.h"

#include <utility>

#include "oscar/core/error.h"

namespace oscar {
namespace {

// A metadata integer that must fit the config's int fields (validate() checks the range
// that makes sense; this only keeps the narrowing from wrapping).
int int_field(const gguf::GgufFile& f, const std::string& key, int64_t value) {
  if (value < 0 || value > (int64_t(1) << 30)) fail("{}: metadata '{}' = {} is out of range", f.path(), key, value);
  return int(value);
}

int required_int(const gguf::GgufFile& f, const std::string& key) { return int_field(f, key, f.get_int(key)); }

int optional_int(const gguf::GgufFile& f, const std::string& key, int64_t fallback) {
  return int_field(f, key, f.get_int(key, fallback));
}

int vocab_size(const gguf::GgufFile& f) {
  if (const gguf::Value* tokens = f.find("tokenizer.ggml.tokens")) {
    if (tokens->type != gguf::ValueType::array)
      fail("{}: metadata 'tokenizer.ggml.tokens' is {}, expected an array", f.path(), value_type_name(tokens->type));
    return int_field(f, "tokenizer.ggml.tokens", int64_t(tokens->array.size()));
  }
  // No tokenizer in the file: the embedding's rows (ne[1]) are the vocabulary.
  const gguf::TensorInfo& emb = f.tensor("token_embd.weight");
  if (emb.ne.size() != 2) fail("{}: tensor 'token_embd.weight' has {} dimensions, expected 2", f.path(), emb.ne.size());
  return int_field(f, "token_embd.weight rows", int64_t(emb.ne[1]));  // the parser bounds ne to int64
}

void read_rope_scaling(const gguf::GgufFile& f, const std::string& arch, RopeScaling& rs) {
  const std::string p = arch + ".rope.scaling.";
  rs.type = f.get_string(p + "type", "none");
  if (rs.type != "none" && rs.type != "linear" && rs.type != "yarn")
    fail("{}: unsupported RoPE scaling type '{}' in '{}type'", f.path(), rs.type, p);
  rs.factor = float(f.get_float(p + "factor", 1.0));
  if (rs.type == "none") rs.factor = 1.0f;
  rs.original_context = optional_int(f, p + "original_context_length", rs.original_context);
}

class GgufWeightSource final : public WeightSource {
 public:
  explicit GgufWeightSource(gguf::GgufFile file) : file_(std::move(file)), cfg_(gguf_model_config(file_)) {}

  const ModelConfig& config() const override { return cfg_; }
  bool has(const std::string& name) const override { return file_.find_tensor(name) != nullptr; }

  // GGUF lists ne innermost first; the interface wants outermost first.
  std::vector<int64_t> shape(const std::string& name) const override {
    const gguf::TensorInfo& t = file_.tensor(name);
    return std::vector<int64_t>(t.ne.rbegin(), t.ne.rend());
  }

  std::vector<float> load_f32(const std::string& name) const override {
    const gguf::TensorInfo& t = file_.tensor(name);
    if (!ggml_type_dequantizable(t.type))
      fail("{}: tensor '{}' has type {}, which oscar cannot dequantize", file_.path(), name, ggml_type_name(t.type));
    return file_.dequantize(t);
  }

  std::optional<RawTensor> raw(const std::string& name) const override {
    const gguf::TensorInfo& t = file_.tensor(name);
    std::shared_ptr<const void> map = file_.mapping();
    if (!map) return std::nullopt;
    return RawTensor{t.type, t.data, std::move(map)};
  }

 private:
  gguf::GgufFile file_;
  ModelConfig cfg_;
};

}  // namespace

ModelConfig gguf_model_config(const gguf::GgufFile& f) {
  ModelConfig c;
  const std::string arch = f.get_string("general.architecture");
  try {
    c.arch = arch_from_name(arch);
  } catch (const Error& e) {
    fail("{}: {}", f.path(), e.what());
  }
  c.name = f.get_string("general.name", "");
  const std::string p = arch + ".";
  c.n_layers = required_int(f, p + "block_count");
  c.n_embd = required_int(f, p + "embedding_length");
  c.n_ff = required_int(f, p + "feed_forward_length");
  c.n_heads = required_int(f, p + "attention.head_count");
  c.n_kv_heads = optional_int(f, p + "attention.head_count_kv", c.n_heads);
  if (c.n_heads == 0) fail("{}: metadata '{}attention.head_count' is 0", f.path(), p);
  if (!f.find(p + "attention.key_length") && c.n_embd % c.n_heads != 0)
    fail("{}: {}embedding_length = {} is not a multiple of {}attention.head_count = {} (and no {}attention.key_length)",
         f.path(), p, c.n_embd, p, c.n_heads, p);
  c.head_dim = optional_int(f, p + "attention.key_length", c.n_embd / c.n_heads);
  if (c.head_dim <= 0) fail("{}: metadata '{}attention.key_length' = {} must be positive", f.path(), p, c.head_dim);
  c.n_ctx_train = required_int(f, p + "context_length");
  c.rms_eps = float(f.get_float(p + "attention.layer_norm_rms_epsilon"));
  c.rope_theta = float(f.get_float(p + "rope.freq_base", 10000.0));
  read_rope_scaling(f, arch, c.rope_scaling);
  c.n_vocab = vocab_size(f);
  // llama.cpp's converter permutes Llama Q/K rows for (2i, 2i+1) rotation; Qwen keeps HF order.
  c.rope_style = c.arch == Arch::llama ? RopeStyle::interleaved : RopeStyle::neox;
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = f.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
  try {
    c.validate();
  } catch (const Error& e) {
    fail("{}: {}", f.path(), e.what());
  }
  return c;
}

std::unique_ptr<WeightSource> open_gguf_source(const std::string& path) {
  return open_gguf_source(gguf::GgufFile::open(path));
}

std::unique_ptr<WeightSource> open_gguf_source(gguf::GgufFile file) {
  return std::make_unique<GgufWeightSource>(std::move(file));
}

}  // namespace oscar
