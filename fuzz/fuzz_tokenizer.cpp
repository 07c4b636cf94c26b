// The tokenizer built from a real GGUF vocabulary (the default model, $OSCAR_MODEL), encoding
// arbitrary bytes: with special tokens parsed and without. Without them, byte-level BPE
// must give the input back exactly when every byte of it has a token.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "oscar/core/error.h"
#include "oscar/formats/gguf.h"
#include "oscar/text/tokenizer.h"

namespace {
std::unique_ptr<oscar::Tokenizer> g_tok;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* path = std::getenv("OSCAR_MODEL");
  if (!path) {
    std::fprintf(stderr, "fuzz_tokenizer: set OSCAR_MODEL to a GGUF file (scripts/env.sh does)\n");
    std::exit(1);
  }
  try {
    const auto f = oscar::gguf::GgufFile::open(path);
    g_tok = std::make_unique<oscar::Tokenizer>(oscar::tokenizer_data_from_gguf(f));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_tokenizer: %s\n", e.what());
    std::exit(1);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  bool all_bytes = true;
  for (const uint8_t b : std::string_view(text)) all_bytes = all_bytes && g_tok->can_encode_byte(b);
  try {
    const auto ids = g_tok->encode(text, /*add_bos=*/false, /*parse_special=*/false);
    for (const int32_t id : ids) FUZZ_EXPECT(id >= 0 && id < g_tok->n_vocab());
    if (all_bytes) FUZZ_EXPECT(g_tok->decode(ids) == text);
  } catch (const oscar::Error&) {
    FUZZ_EXPECT(!all_bytes);  // only a byte without a token may be refused
  }
  try {
    const auto ids = g_tok->encode(text, /*add_bos=*/true, /*parse_special=*/true);
    for (const int32_t id : ids) FUZZ_EXPECT(id >= 0 && id < g_tok->n_vocab());
    (void)g_tok->decode(ids, /*render_control=*/false);
  } catch (const oscar::Error&) {
  }
  return 0;
}
