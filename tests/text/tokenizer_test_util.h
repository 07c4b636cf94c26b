// Shared helpers for the tokenizer tests: fixture paths and the real model (optional).
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "oscar/formats/gguf.h"
#include "oscar/text/tokenizer.h"

namespace oscar::test {

inline std::string source_path(const std::string& rel) { return std::string(OSCAR_SOURCE_DIR) + "/" + rel; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline nlohmann::json read_json(const std::string& rel) { return nlohmann::json::parse(read_file(source_path(rel))); }

inline std::string model_path() {
  const char* env = std::getenv("OSCAR_MODEL");
  return env != nullptr && *env != '\0' ? env : "/root/.cache/oscar/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The SmolLM2 tokenizer, built once per test binary; nullptr when the model is absent.
inline const Tokenizer* smollm2_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    if (!std::filesystem::exists(model_path())) return nullptr;
    const auto f = gguf::GgufFile::open(model_path());
    return std::make_unique<Tokenizer>(tokenizer_data_from_gguf(f));
  }();
  return tok.get();
}

}  // namespace oscar::test
