// A Hugging Face checkpoint (config.json + safetensors) as a WeightSource: the config
// becomes a ModelConfig and HF tensor names are mapped onto the GGUF names the engine uses.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "oscar/model/weight_source.h"

namespace oscar {

// `path`: a directory holding config.json and the safetensors file(s), or one
// .safetensors file with config.json beside it. Throws oscar::Error naming the file.
std::unique_ptr<WeightSource> open_safetensors_source(const std::string& path);

// HF tensor name -> GGUF name ("model.layers.3.mlp.up_proj.weight" -> "blk.3.ffn_up.weight");
// nullopt for names the engine does not use (e.g. rotary_emb.inv_freq).
std::optional<std::string> hf_to_gguf_name(const std::string& hf_name);

}  // namespace oscar
