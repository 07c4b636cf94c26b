// A tokenizer for the 50-token vocabulary of tiny_model.h: distinct printable tokens, no
// merges, no end-of-generation token (so generation runs to its limits).
#pragma once
#include <string>

#include "oscar/text/tokenizer.h"

namespace oscar::test {

inline Tokenizer tiny_tokenizer() {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = "gpt2";
  for (int i = 0; i < 50; ++i) d.tokens.push_back(std::string(1, char('a' + i % 26)) + std::to_string(i) + " ");
  return Tokenizer(d);
}

}  // namespace oscar::test
