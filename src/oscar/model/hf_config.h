// Hugging Face config.json -> ModelConfig (Llama, Qwen2, Qwen3 checkpoints).
#pragma once
#include <string>

#include "oscar/model/model_config.h"

namespace oscar {

// Parses the text of a config.json (`file` names it in errors) and validates the result.
// Safetensors checkpoints always use neox RoPE (HF rotate_half).
ModelConfig parse_hf_config(const std::string& json_text, const std::string& file);

}  // namespace oscar
