// Loads the NumPy reference's golden JSON and the default model once per test binary.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "../test_util.h"
#include "oscar/formats/gguf.h"
#include "oscar/model/transformer.h"
#include "oscar/text/tokenizer.h"

namespace oscar::test {

struct GoldenModel {
  nlohmann::json golden;
  std::unique_ptr<Transformer> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// nullptr when the model or the golden file is absent (the caller skips), unless
// OSCAR_REQUIRE_MODEL=1, when absence is a failure.
const GoldenModel* golden_model();

#define OSCAR_NEED_GOLDEN(g)                                                                  \
  const ::oscar::test::GoldenModel* g = ::oscar::test::golden_model();                        \
  if (!g) {                                                                                   \
    const char* req = std::getenv("OSCAR_REQUIRE_MODEL");                                     \
    if (req && req[0] == '1') FAIL() << "default model or golden file missing";               \
    GTEST_SKIP() << "default model or golden file missing (run scripts/setup.sh)";            \
  }

}  // namespace oscar::test
