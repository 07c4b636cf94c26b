// Hyperparameters of a decoder-only transformer (Llama, Qwen2, Qwen3 families),
// read from GGUF metadata or from a Hugging Face config.json.
#pragma once
#include <cstdint>
#include <string>

#include "oscar/model/model_dims.h"

namespace oscar {

enum class Arch { llama, qwen2, qwen3 };

struct RopeScaling {
  std::string type = "none";  // none | linear | llama3 | yarn (yarn: factor only)
  float factor = 1.0f;
  // llama3-style frequency-dependent scaling:
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_context = 8192;
};

// The dimensions both engines share (model_dims.h), and what a file says besides.
struct ModelConfig : ModelDims {
  Arch arch = Arch::llama;
  std::string name;         // general.name or the directory name
  int n_ctx_train = 0;      // trained context length
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::neox;
  RopeScaling rope_scaling;

  // Throws oscar::Error naming the first inconsistent field.
  void validate() const;
};

const char* arch_name(Arch a);
Arch arch_from_name(const std::string& s);  // throws oscar::Error for unsupported architectures

}  // namespace oscar
