#include "oscar/model/safetensors_weight_source.h"

#include <filesystem>
#include <map>
#include <utility>

#include "oscar/core/error.h"
#include "oscar/core/mapped_file.h"
#include "oscar/formats/safetensors.h"
#include "oscar/model/hf_config.h"

namespace oscar {

namespace {

namespace fs = std::filesystem;
namespace st = safetensors;

// Per-layer HF suffixes (after "model.layers.N.") and their GGUF counterparts.
constexpr std::pair<const char*, const char*> layer_names[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

class SafetensorsWeightSource final : public WeightSource {
 public:
  SafetensorsWeightSource(ModelConfig cfg, st::SafetensorsModel model) : cfg_(std::move(cfg)), model_(std::move(model)) {
    for (const auto& hf : model_.tensor_names()) {
      if (auto g = hf_to_gguf_name(hf)) names_.emplace(*g, hf);
    }
    // Checkpoints with tied embeddings usually omit lm_head; the engine then reuses token_embd.
    if (!names_.count("output.weight")) cfg_.tied_embeddings = true;
    for (const char* required : {"token_embd.weight", "output_norm.weight"})
      if (!names_.count(required)) fail("safetensors model: missing tensor '{}' ({})", required, hf_name_for(required));
  }

  const ModelConfig& config() const override { return cfg_; }
  bool has(const std::string& name) const override { return names_.count(name) > 0; }
  std::vector<int64_t> shape(const std::string& name) const override { return info(name).shape; }
  std::vector<float> load_f32(const std::string& name) const override { return model_.load_f32(lookup(name)); }

  // F32 / F16 / BF16 rows as stored (HF keeps [out, in] row-major, as GGUF does).
  std::optional<RawTensor> raw(const std::string& name) const override {
    const st::TensorInfo& t = info(name);
    GgmlType type;
    switch (t.dtype) {
      case st::Dtype::f32: type = GgmlType::f32; break;
      case st::Dtype::f16: type = GgmlType::f16; break;
      case st::Dtype::bf16: type = GgmlType::bf16; break;
      default: return std::nullopt;
    }
    std::shared_ptr<const void> map = model_.mapping(lookup(name));
    if (!map) return std::nullopt;
    return RawTensor{type, t.data, std::move(map)};
  }

 private:
  const std::string& lookup(const std::string& name) const {
    const auto it = names_.find(name);
    if (it == names_.end()) fail("safetensors model: no tensor '{}'", name);
    return it->second;
  }
  const st::TensorInfo& info(const std::string& name) const { return model_.tensor(lookup(name)); }
  static const char* hf_name_for(const std::string& g) {
    return g == "token_embd.weight" ? "model.embed_tokens.weight" : "model.norm.weight";
  }

  ModelConfig cfg_;
  st::SafetensorsModel model_;
  std::map<std::string, std::string> names_;  // GGUF name -> HF name
};

// "/models/tiny_llama_st/" -> "tiny_llama_st" (the checkpoint has no name of its own).
std::string directory_name(const fs::path& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir.empty() ? fs::path(".") : dir, ec).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace

std::optional<std::string> hf_to_gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) != 0) return std::nullopt;
  size_t i = prefix.size();
  const size_t digits = i;
  while (i < hf.size() && hf[i] >= '0' && hf[i] <= '9') ++i;
  // A layer index: 1..9 digits, no leading zeros, then a dot.
  if (i == digits || i - digits > 9 || (hf[digits] == '0' && i - digits > 1) || i >= hf.size() || hf[i] != '.')
    return std::nullopt;
  const std::string layer = hf.substr(digits, i - digits);
  const std::string rest = hf.substr(i + 1);
  for (const auto& [from, to] : layer_names)
    if (rest == from) return "blk." + layer + "." + to;
  return std::nullopt;
}

std::unique_ptr<WeightSource> open_safetensors_source(const std::string& path) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  const fs::path dir = is_dir ? fs::path(path) : fs::path(path).parent_path();
  const fs::path config_path = (dir.empty() ? fs::path(".") : dir) / "config.json";
  if (!fs::exists(config_path, ec)) fail("'{}': no config.json beside the safetensors weights", path);
  MappedFile cf(config_path.string());
  ModelConfig cfg = parse_hf_config(std::string(reinterpret_cast<const char*>(cf.data()), cf.size()), config_path.string());
  cfg.name = directory_name(dir);
  return std::make_unique<SafetensorsWeightSource>(std::move(cfg), st::SafetensorsModel::open(path));
}

}  // namespace oscar
