#include "oscar/serve/request_state.h"

namespace oscar::serve {

void RequestState::append(std::string_view text, const TokenLogprob* lp, int64_t completion_tokens) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    out_.text += text;
    if (lp) out_.logprobs.push_back(*lp);
    out_.usage.completion_tokens = completion_tokens;
    has_news_ = true;
  }
  cv_.notify_all();
}

void RequestState::finish(std::string reason, const Usage& usage, std::string error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    out_.finished = true;
    out_.finish_reason = std::move(reason);
    out_.error = std::move(error);
    out_.usage = usage;
    has_news_ = true;
  }
  cv_.notify_all();
}

void RequestState::set_cached_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  out_.usage.cached_tokens = n;
}

GenerationOutput RequestState::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return has_news_; });
  GenerationOutput got = out_;
  out_.text.clear();
  out_.logprobs.clear();
  has_news_ = false;
  return got;
}

}  // namespace oscar::serve
