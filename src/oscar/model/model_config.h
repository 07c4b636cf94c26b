// Hyperparameters of a decoder-only transformer (Llama, Qwen2, Qwen3 families),
// read from GGUF metadata or from a Hugging Face config.json.
#pragma once
#include <cstdint>
#include <string>

namespace oscar {

enum class Arch { llama, qwen2, qwen3 };

// How RoPE pairs dimensions: `interleaved` rotates (2i, 2i+1) (llama.cpp's "normal" mode,
// used for GGUF Llama files whose Q/K rows the converter permuted); `neox` rotates
// (i, i + d/2) (HF rotate_half; Qwen2/Qwen3 GGUF and every safetensors model).
enum class RopeStyle { interleaved, neox };

struct RopeScaling {
  std::string type = "none";  // none | linear | llama3 | yarn (yarn: factor only)
  float factor = 1.0f;
  // llama3-style frequency-dependent scaling:
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_context = 8192;
};

struct ModelConfig {
  Arch arch = Arch::llama;
  std::string name;         // general.name or the directory name
  int n_layers = 0;
  int n_embd = 0;           // hidden size
  int n_ff = 0;             // FFN inner size
  int n_heads = 0;          // query heads
  int n_kv_heads = 0;       // key/value heads (GQA when < n_heads)
  int head_dim = 0;         // usually n_embd / n_heads; Qwen3 sets it explicitly
  int n_vocab = 0;
  int n_ctx_train = 0;      // trained context length
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::neox;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;  // output projection reuses token_embd
  bool qkv_bias = false;         // Qwen2
  bool qk_norm = false;          // Qwen3: RMSNorm on q and k per head before RoPE

  // Throws oscar::Error naming the first inconsistent field.
  void validate() const;
};

const char* arch_name(Arch a);
Arch arch_from_name(const std::string& s);  // throws oscar::Error for unsupported architectures

}  // namespace oscar
