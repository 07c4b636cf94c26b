// Where weights come from: a GGUF or a safetensors model, behind one interface.
// Tensor names are the GGUF names (token_embd.weight, blk.N.attn_q.weight, ...);
// a safetensors source maps the Hugging Face names onto them. Shapes are row-major,
// outermost first: a linear layer's weight is [out_features, in_features] in both.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "oscar/formats/ggml_type.h"
#include "oscar/model/model_config.h"

namespace oscar {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const ModelConfig& config() const = 0;
  virtual bool has(const std::string& name) const = 0;
  // Throws oscar::Error naming the tensor if it is missing.
  virtual std::vector<int64_t> shape(const std::string& name) const = 0;
  // Dequantized to f32, row-major in `shape` order. Throws oscar::Error on any problem.
  virtual std::vector<float> load_f32(const std::string& name) const = 0;

  // The tensor's bytes as stored (its ggml type, rows of ggml_row_bytes), valid while
  // `keep_alive` is held; nullopt where the source cannot give a view (then load_f32).
  struct RawTensor {
    GgmlType type = GgmlType::f32;
    const void* data = nullptr;
    std::shared_ptr<const void> keep_alive;
  };
  virtual std::optional<RawTensor> raw(const std::string& name) const { return std::nullopt; }
};

// Opens a .gguf file, or a directory / .safetensors file with a config.json beside it.
std::unique_ptr<WeightSource> open_weight_source(const std::string& path);
// Throws oscar::Error "model '<path>' does not exist" when nothing is there.
void check_model_exists(const std::string& path);

}  // namespace oscar
