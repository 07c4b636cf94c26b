#include "oscar/model/hf_config.h"

#include <limits>

#include <nlohmann/json.hpp>

#include "oscar/core/error.h"
#include "oscar/formats/json_integer.h"

namespace oscar {

namespace {

using json = nlohmann::json;

// Typed access to one JSON object; a null value counts as absent (HF writes
// "head_dim": null and "rope_scaling": null).
class Fields {
 public:
  Fields(const json& j, const std::string& file, std::string prefix = "")
      : j_(j), file_(file), prefix_(std::move(prefix)) {}

  const json* find(const char* key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  int get_int(const char* key) const {
    const json* v = find(key);
    if (!v) fail("{}: missing '{}{}'", file_, prefix_, key);
    return to_int(*v, key);
  }
  int get_int(const char* key, int fallback) const {
    const json* v = find(key);
    return v ? to_int(*v, key) : fallback;
  }
  float get_float(const char* key, float fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number()) fail("{}: '{}{}' must be a number", file_, prefix_, key);
    return v->get<float>();
  }
  bool get_bool(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail("{}: '{}{}' must be true or false", file_, prefix_, key);
    return v->get<bool>();
  }
  std::string get_string(const char* key, std::string fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) fail("{}: '{}{}' must be a string", file_, prefix_, key);
    return v->get<std::string>();
  }

 private:
  int to_int(const json& v, const char* key) const {
    const JsonInteger x = json_integer(v, std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
    if (!x.integer) fail("{}: '{}{}' must be an integer", file_, prefix_, key);
    if (!x.in_range) fail("{}: '{}{}' = {} is out of range", file_, prefix_, key, x.value);
    return int(x.value);
  }

  const json& j_;
  const std::string& file_;
  std::string prefix_;
};

Arch parse_arch(const json& j, const Fields& f, const std::string& file) {
  if (const json* a = f.find("architectures")) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string()) fail("{}: 'architectures' must be a list of names", file);
    const std::string name = (*a)[0].get<std::string>();
    if (name == "LlamaForCausalLM") return Arch::llama;
    if (name == "Qwen2ForCausalLM") return Arch::qwen2;
    if (name == "Qwen3ForCausalLM") return Arch::qwen3;
    fail("{}: unsupported architecture '{}' (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)", file, name);
  }
  const std::string type = f.get_string("model_type", "");
  if (type.empty()) fail("{}: neither 'architectures' nor 'model_type' is given", file);
  return arch_from_name(type);
}

// rope_scaling (transformers <= 4.x) or rope_parameters (5.x); both spell the kind
// as "rope_type" or, in older files, "type".
RopeScaling parse_rope_scaling(const json& s, const std::string& file, const char* where) {
  if (!s.is_object()) fail("{}: '{}' must be an object", file, where);
  const Fields f(s, file, std::string(where) + ".");
  RopeScaling r;
  std::string type = f.get_string("rope_type", f.get_string("type", "default"));
  if (type == "default" || type == "none") return r;
  if (type != "linear" && type != "llama3" && type != "yarn")
    fail("{}: {}.rope_type '{}' is not supported (supported: default, linear, llama3, yarn)", file, where, type);
  r.type = type;
  r.factor = f.get_float("factor", 1.0f);
  r.low_freq_factor = f.get_float("low_freq_factor", r.low_freq_factor);
  r.high_freq_factor = f.get_float("high_freq_factor", r.high_freq_factor);
  r.original_context = f.get_int("original_max_position_embeddings", r.original_context);
  return r;
}

}  // namespace

ModelConfig parse_hf_config(const std::string& text, const std::string& file) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("{}: not valid JSON", file);
  if (!j.is_object()) fail("{}: must be a JSON object", file);
  const Fields f(j, file);

  ModelConfig c;
  c.arch = parse_arch(j, f, file);
  c.n_layers = f.get_int("num_hidden_layers");
  c.n_embd = f.get_int("hidden_size");
  c.n_ff = f.get_int("intermediate_size");
  c.n_heads = f.get_int("num_attention_heads");
  c.n_kv_heads = f.get_int("num_key_value_heads", c.n_heads);
  if (c.n_heads <= 0) fail("{}: num_attention_heads = {} must be positive", file, c.n_heads);
  if (!f.find("head_dim") && c.n_embd % c.n_heads != 0)
    fail("{}: hidden_size = {} is not a multiple of num_attention_heads = {} (and no head_dim)", file, c.n_embd,
         c.n_heads);
  c.head_dim = f.get_int("head_dim", c.n_embd / c.n_heads);
  c.n_vocab = f.get_int("vocab_size");
  c.n_ctx_train = f.get_int("max_position_embeddings", 2048);  // transformers' default
  c.rms_eps = f.get_float("rms_norm_eps", 1e-6f);
  c.rope_theta = f.get_float("rope_theta", 10000.0f);
  if (const json* s = f.find("rope_scaling")) c.rope_scaling = parse_rope_scaling(*s, file, "rope_scaling");
  if (const json* p = f.find("rope_parameters")) {
    c.rope_scaling = parse_rope_scaling(*p, file, "rope_parameters");
    c.rope_theta = Fields(*p, file, "rope_parameters.").get_float("rope_theta", c.rope_theta);
  }
  c.rope_style = RopeStyle::neox;
  c.tied_embeddings = f.get_bool("tie_word_embeddings", false);
  c.qkv_bias = c.arch == Arch::qwen2 || f.get_bool("attention_bias", false);
  c.qk_norm = c.arch == Arch::qwen3;
  c.validate();
  return c;
}

}  // namespace oscar
