#include "oscar/model/model_config.h"

#include "oscar/core/error.h"

namespace oscar {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::llama: return "llama";
    case Arch::qwen2: return "qwen2";
    case Arch::qwen3: return "qwen3";
  }
  return "?";
}

Arch arch_from_name(const std::string& s) {
  if (s == "llama") return Arch::llama;
  if (s == "qwen2") return Arch::qwen2;
  if (s == "qwen3") return Arch::qwen3;
  fail("unsupported model architecture '{}' (supported: llama, qwen2, qwen3)", s);
}

void ModelConfig::validate() const {
  auto positive = [](const char* field, long v) {
    if (v <= 0 || v > (1L << 24)) fail("model config: {} = {} is out of range", field, v);
  };
  positive("n_layers", n_layers);
  positive("n_embd", n_embd);
  positive("n_ff", n_ff);
  positive("n_heads", n_heads);
  positive("n_kv_heads", n_kv_heads);
  positive("head_dim", head_dim);
  positive("n_vocab", n_vocab);
  positive("n_ctx_train (the trained context length)", n_ctx_train);
  if (n_heads % n_kv_heads != 0)
    fail("model config: n_heads = {} is not a multiple of n_kv_heads = {}", n_heads, n_kv_heads);
  if (head_dim % 2 != 0) fail("model config: head_dim = {} must be even for RoPE", head_dim);
  if (!(rms_eps > 0.0f && rms_eps < 1.0f)) fail("model config: rms_eps = {} is out of range", rms_eps);
  if (!(rope_theta > 0.0f)) fail("model config: rope_theta = {} must be positive", rope_theta);
  if (!(rope_scaling.factor > 0.0f)) fail("model config: rope scaling factor = {} must be positive", rope_scaling.factor);
}

}  // namespace oscar
