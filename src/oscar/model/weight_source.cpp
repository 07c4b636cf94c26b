#include "oscar/model/weight_source.h"

#include <filesystem>

#include "oscar/core/error.h"
#include "oscar/model/gguf_weight_source.h"
#include "oscar/model/safetensors_weight_source.h"

namespace oscar {

void check_model_exists(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("model '{}' does not exist", path);
}

std::unique_ptr<WeightSource> open_weight_source(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  check_model_exists(path);
  if (fs::is_directory(path, ec) || path.ends_with(".safetensors")) return open_safetensors_source(path);
  return open_gguf_source(path);
}

}  // namespace oscar
