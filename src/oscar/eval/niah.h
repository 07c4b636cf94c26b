// Needle in a haystack, RULER's niah_single task: a filler text (the haystack) hides
// one sentence "One of the special magic numbers for {key} is: {value}." at a given
// depth; the model is asked for the value and must complete it greedily. This file
// builds the prompt at a requested length in tokens, runs one trial, and scores it.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "oscar/engine/runner.h"
#include "oscar/kv/kv_cache.h"
#include "oscar/model/transformer.h"
#include "oscar/text/chat_template.h"
#include "oscar/text/tokenizer.h"

namespace oscar {

struct NiahNeedle {
  std::string key;    // two words hyphen-joined, e.g. "bright-river"
  std::string value;  // 7 decimal digits, first one non-zero
};

// A needle drawn from fixed word lists; the same generator state gives the same needle.
NiahNeedle random_needle(std::mt19937_64& rng);
// "One of the special magic numbers for {key} is: {value}."
std::string needle_sentence(const NiahNeedle& n);

// `haystack` with `sentence` inserted at depth_percent (0..100) of its bytes: 0 puts it
// before everything, 100 after everything; in between it goes right after the sentence
// end ('.' then a space or newline) nearest that point, so it reads naturally (at the
// point itself, on a UTF-8 boundary, when the text has no sentence end). A space is
// added where the sentence would otherwise touch a neighbouring word.
std::string insert_needle(std::string_view haystack, std::string_view sentence, double depth_percent);

// How the prompt is wrapped: the model's chat template (none: raw text) and its BOS.
struct NiahFormat {
  ChatTemplateKind chat = ChatTemplateKind::none;
  std::string default_system;  // the template's own system message, if any
  bool add_bos = false;
};

// The whole prompt as text: the task in a user turn, then (after the assistant header)
// the start of the answer, "The special magic number for {key} mentioned in the
// provided text is", so the model only has to complete the number.
std::string niah_prompt_text(const NiahFormat& f, const NiahNeedle& needle, std::string_view haystack_with_needle);

struct NiahPrompt {
  std::string text;
  std::vector<int32_t> ids;     // text tokenized once, special tokens parsed
  int64_t haystack_tokens = 0;  // filler tokens taken from the haystack (before the needle went in)
};

// A prompt of about target_tokens tokens (at most target_tokens whenever some filler
// size reaches it, else the closest found): the first filler tokens of haystack_ids
// (cycled when too few), decoded, the needle inserted at depth_percent, the whole
// tokenized. Tokenizing the joined text is not additive, so the filler size is
// corrected from the measured length a few times. Throws oscar::Error when the
// haystack is empty or target_tokens cannot hold the prompt without filler.
NiahPrompt build_niah_prompt(const Tokenizer& tok, std::span<const int32_t> haystack_ids, const NiahNeedle& needle,
                             double depth_percent, int64_t target_tokens, const NiahFormat& f);

// Correct iff some maximal run of digits in `generated` is exactly `value`
// ("is 1234567." yes; "is 1234568" or "12345678" no).
bool niah_correct(std::string_view generated, std::string_view value);

struct NiahGeneration {
  std::vector<int32_t> ids;  // generated tokens, end-of-generation excluded
  std::string text;          // their text, control tokens dropped
  double kv_bits_per_element = 0.0;  // the cache after the prompt
};

// Appends `prompt` to `seq` in chunks of prefill_chunk tokens (bounded activation memory
// at long lengths; only the last chunk's logits are kept), then decodes greedily up to
// max_new tokens, stopping at an end-of-generation token or when the cache is full.
// On any Runner (CPU or GPU), through engine::generate with a greedy sampler.
NiahGeneration niah_generate(engine::Runner& runner, const Tokenizer& tok, SeqId seq, std::span<const int32_t> prompt,
                             int max_new = 12, int prefill_chunk = 512);

}  // namespace oscar
