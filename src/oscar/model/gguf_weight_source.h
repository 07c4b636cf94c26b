// A GGUF model file as a WeightSource: metadata becomes a ModelConfig, tensors keep
// their GGUF names and are dequantized to f32 on load.
#pragma once
#include <memory>
#include <string>

#include "oscar/formats/gguf.h"
#include "oscar/model/weight_source.h"

namespace oscar {

// Maps and parses `path`; throws oscar::Error naming the file and the bad field or tensor.
std::unique_ptr<WeightSource> open_gguf_source(const std::string& path);
// The same over a file already parsed (its metadata read for the tokenizer first).
std::unique_ptr<WeightSource> open_gguf_source(gguf::GgufFile file);

// The ModelConfig a GGUF file describes (general.architecture and {arch}.* keys, the
// tokenizer's vocabulary size, and which optional tensors exist). Validated.
ModelConfig gguf_model_config(const gguf::GgufFile& file);

}  // namespace oscar
