// TokenizerData from a Hugging Face model directory: tokenizer.json (a `tokenizers`
// byte-level BPE) plus tokenizer_config.json when present. The pre-tokenizer is
// recognised by its structure and mapped onto one of oscar's pre types (pre_type.h).
#pragma once
#include <string>

#include "oscar/text/tokenizer.h"

namespace oscar {

// Reads <model_dir>/tokenizer.json and <model_dir>/tokenizer_config.json (optional).
// Accepts model.type "BPE" over the GPT-2 byte alphabet with one of these
// pre-tokenizers: ByteLevel(use_regex) -> "gpt2"; Digits(individual_digits) then
// ByteLevel(use_regex) -> "smollm"; Split(<Llama 3 regex>) then ByteLevel(no regex) ->
// "llama-bpe"; Split(<Qwen2 regex>) then ByteLevel(no regex) -> "qwen2". Added tokens
// become CONTROL (special) or USER_DEFINED tokens and may extend past the vocab.
// BOS/EOS/PAD come from tokenizer_config.json; add_bos from its add_bos_token, else
// from whether the post-processor prepends the BOS. Throws oscar::Error naming the
// file and field for anything else (missing file, bad JSON, unsupported model or
// pre-tokenizer, ids out of range, duplicate or missing ids).
TokenizerData tokenizer_data_from_hf(const std::string& model_dir);

// The Jinja chat template of the directory: tokenizer_config.json's chat_template (a
// string, or the "default" entry of a list of {name, template}), else the file
// chat_template.jinja, else chat_template.json's chat_template; "" when none.
// Throws oscar::Error for a file that exists but does not parse.
std::string hf_chat_template(const std::string& model_dir);

}  // namespace oscar
