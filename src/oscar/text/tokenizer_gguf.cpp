// TokenizerData from the tokenizer.ggml.* metadata of a GGUF file. Keys that llama.cpp
// treats as optional get the same defaults here.
#include <cstdint>

#include "oscar/core/error.h"
#include "oscar/formats/gguf.h"
#include "oscar/text/tokenizer.h"

namespace oscar {
namespace {

int32_t id_key(const gguf::GgufFile& f, std::string_view key) {
  const int64_t v = f.get_int(key, -1);
  if (v < -1 || v > INT32_MAX) fail("{}: {} = {} is not a token id", f.path(), key, v);
  return static_cast<int32_t>(v);
}

}  // namespace

TokenizerData tokenizer_data_from_gguf(const gguf::GgufFile& f) {
  TokenizerData d;
  d.model = f.get_string("tokenizer.ggml.model");
  d.pre = f.get_string("tokenizer.ggml.pre", "default");
  d.tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (f.find("tokenizer.ggml.token_type") != nullptr) {
    for (int64_t t : f.get_int_array("tokenizer.ggml.token_type")) {
      if (t < INT32_MIN || t > INT32_MAX) fail("{}: tokenizer.ggml.token_type holds {}", f.path(), t);
      d.token_types.push_back(static_cast<int32_t>(t));
    }
  }
  if (f.find("tokenizer.ggml.merges") != nullptr) d.merges = f.get_string_array("tokenizer.ggml.merges");
  d.bos_id = id_key(f, "tokenizer.ggml.bos_token_id");
  d.eos_id = id_key(f, "tokenizer.ggml.eos_token_id");
  d.eot_id = id_key(f, "tokenizer.ggml.eot_token_id");
  d.pad_id = id_key(f, "tokenizer.ggml.padding_token_id");
  const auto spec = find_pre_type(d.pre);
  d.add_bos = f.get_bool("tokenizer.ggml.add_bos_token", spec && spec->default_add_bos);
  d.add_eos = f.get_bool("tokenizer.ggml.add_eos_token", false);
  return d;
}

}  // namespace oscar
