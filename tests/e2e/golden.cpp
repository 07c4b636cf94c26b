#include "golden.h"

#include "oscar/model/weight_source.h"

namespace oscar::test {

const GoldenModel* golden_model() {
  static std::unique_ptr<GoldenModel> g = []() -> std::unique_ptr<GoldenModel> {
    const std::string model_path = default_model_path();
    if (!std::filesystem::exists(model_path) || !std::filesystem::exists(OSCAR_GOLDEN)) return nullptr;
    auto out = std::make_unique<GoldenModel>();
    std::ifstream in(OSCAR_GOLDEN);
    out->golden = nlohmann::json::parse(in);
    auto src = open_weight_source(model_path);
    out->model = std::make_unique<Transformer>(load_model_weights(*src));
    out->tokenizer = std::make_unique<Tokenizer>(tokenizer_data_from_gguf(gguf::GgufFile::open(model_path)));
    return out;
  }();
  return g.get();
}

}  // namespace oscar::test
