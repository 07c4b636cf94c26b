// The one prefill → decode loop for a single sequence on any Runner (run, chat, and
// anything else that completes one prompt at a time).
#pragma once
#include <cstdint>
#include <functional>
#include <span>

#include "oscar/engine/runner.h"
#include "oscar/sampling/sampler.h"
#include "oscar/text/tokenizer.h"

namespace oscar::engine {

struct GenerationStats {
  int64_t n_prompt = 0, n_generated = 0;
  double prompt_seconds = 0.0, generate_seconds = 0.0;
  int64_t kv_bytes_after_prompt = 0;  // what the sequence's KV holds once the prompt is in
};

// Feeds the prompt (in runs of prefill_chunk tokens, 0: all at once; only the last run's
// logits are kept, which bounds activation memory at long lengths), then samples up to
// n_predict tokens, calling on_token for each new one (return false to stop). Stops at an
// end-of-generation token, which is not passed on, and when the sequence's pages run out.
// `forced` (timing runs, like llama-bench's tg test): when not empty, token i is forced[i]
// instead of a sampled one, and end-of-generation does not stop the loop.
GenerationStats generate(Runner& runner, const Tokenizer& tokenizer, SeqId seq, std::span<const int32_t> prompt,
                         int n_predict, Sampler& sampler, const std::function<bool(int32_t)>& on_token,
                         int64_t prefill_chunk = 0, std::span<const int32_t> forced = {});

}  // namespace oscar::engine
