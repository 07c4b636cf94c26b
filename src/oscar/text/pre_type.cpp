// Regexes are the ones in each model's tokenizer.json (Hugging Face `tokenizers`),
// which PCRE2 runs as written, lookahead and inline (?i:) included. Aliases follow the
// names llama.cpp's converter writes for models with the same pre-tokenizer.
#include "oscar/text/pre_type.h"

#include <array>

namespace oscar {
namespace {

// GPT-2's pattern, also the one inside HF's ByteLevel pre-tokenizer (use_regex=true).
constexpr const char* k_gpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// SmolLM/StarCoder: Digits(individual_digits) runs before ByteLevel's GPT-2 split.
constexpr const char* k_each_digit = R"(\p{N})";
constexpr const char* k_llama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2 differs from Llama 3 only in splitting numbers into single digits.
constexpr const char* k_qwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Alias {
  std::string_view name;
  std::string_view family;
};
constexpr std::array k_aliases = {
    Alias{"default", "gpt2"},   Alias{"gpt2", "gpt2"},        Alias{"gpt-2", "gpt2"},
    Alias{"smollm", "smollm"},  Alias{"starcoder", "smollm"}, Alias{"refact", "smollm"},
    Alias{"llama3", "llama3"},  Alias{"llama-v3", "llama3"},  Alias{"llama-bpe", "llama3"},
    Alias{"qwen2", "qwen2"},    Alias{"deepseek-r1-qwen", "qwen2"},
};

}  // namespace

std::optional<PreTypeSpec> find_pre_type(std::string_view pre) {
  for (const Alias& a : k_aliases) {
    if (a.name != pre) continue;
    PreTypeSpec s;
    s.family = std::string(a.family);
    if (a.family == "gpt2") {
      s.regexes = {k_gpt2};
    } else if (a.family == "smollm") {
      s.regexes = {k_each_digit, k_gpt2};
    } else if (a.family == "llama3") {
      s.regexes = {k_llama3};
      s.ignore_merges = true;
      s.default_add_bos = true;
    } else {
      s.regexes = {k_qwen2};
    }
    return s;
  }
  return std::nullopt;
}

std::string known_pre_types() {
  std::string out;
  for (const Alias& a : k_aliases) {
    if (!out.empty()) out += ", ";
    out += a.name;
  }
  return out;
}

}  // namespace oscar
