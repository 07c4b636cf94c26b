// One generation request as the engine thread and an HTTP thread share it: the inputs
// (fixed at submit), and an output channel the engine appends to and the HTTP thread
// drains. Cancelling is a flag the engine reads at the start of its next step.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "oscar/sampling/sampler.h"
#include "oscar/serve/openai_api.h"

namespace oscar::serve {

struct GenerationInput {
  std::vector<int32_t> prompt;        // token ids, BOS included when the model adds one
  int64_t max_new_tokens = 0;         // ≥ 1; the caller caps it to the context
  SamplerParams sampling;
  std::vector<std::string> stop;
  bool logprobs = false;
  int top_logprobs = 0;
};

// What the engine has produced so far; the HTTP thread takes it in pieces.
struct GenerationOutput {
  std::string text;                   // new text since the last take
  std::vector<TokenLogprob> logprobs; // one per generated token since the last take (with logprobs)
  bool finished = false;
  std::string finish_reason;          // stop | length (| cancelled, error: internal)
  std::string error;                  // set when the engine failed the request
  Usage usage;
};

class RequestState {
 public:
  explicit RequestState(GenerationInput in) : input(std::move(in)) {}
  const GenerationInput input;
  const std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();

  // Engine side.
  void append(std::string_view text, const TokenLogprob* lp, int64_t completion_tokens);
  void finish(std::string reason, const Usage& usage, std::string error = "");
  void set_cached_tokens(int64_t n);

  // HTTP side: waits up to `timeout` for new output or the end, then takes what is there.
  GenerationOutput take(std::chrono::milliseconds timeout);
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  GenerationOutput out_;
  bool has_news_ = false;
  std::atomic<bool> cancelled_{false};
};

}  // namespace oscar::serve
