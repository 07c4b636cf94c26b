// What each GGUF `tokenizer.ggml.pre` name means for a byte-level BPE vocabulary: the
// regex stages of the pre-tokenizer and the BPE options that come with them.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oscar {

struct PreTypeSpec {
  std::string family;                // "gpt2", "smollm", "llama3" or "qwen2"
  std::vector<std::string> regexes;  // applied in order; each splits every piece of the last
  bool ignore_merges = false;        // a piece that is itself a token skips BPE (Llama 3)
  bool default_add_bos = false;      // when the GGUF has no tokenizer.ggml.add_bos_token
};

// nullopt for a pre type this tokenizer does not implement.
std::optional<PreTypeSpec> find_pre_type(std::string_view pre);

// The names find_pre_type accepts, for error messages.
std::string known_pre_types();

}  // namespace oscar
