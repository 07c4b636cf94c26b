#include "oscar/serve/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace oscar::serve {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  // An empty stop would match before every byte.
  for (std::string& s : stops) {
    if (s.empty()) continue;
    max_len_ = std::max(max_len_, s.size());
    stops_.push_back(std::move(s));
  }
}

size_t StopMatcher::first_match(std::string_view text) const {
  size_t best = std::string::npos;
  for (const std::string& s : stops_) best = std::min(best, text.find(s));
  return best;
}

size_t StopMatcher::first_partial(std::string_view text) const {
  // Only the last max_len_ - 1 positions can start a proper prefix of a stop.
  const size_t from = text.size() >= max_len_ ? text.size() - max_len_ + 1 : 0;
  for (size_t p = from; p < text.size(); ++p) {
    const std::string_view tail = text.substr(p);
    for (const std::string& s : stops_)
      if (tail.size() < s.size() && std::string_view(s).starts_with(tail)) return p;
  }
  return std::string::npos;
}

// Invariant: every byte emitted so far is known not to start a stop occurrence. A
// complete match therefore wins unless an earlier position may still start a longer
// stop (stops "abcd" and "bc" after "abc"); then we emit up to that position and wait.
StopMatcher::Result StopMatcher::push(std::string_view text) {
  if (stopped_) return {"", true};
  held_.append(text);
  const size_t match = first_match(held_);
  const size_t partial = first_partial(held_);
  Result r;
  // A partial at the match's own start (stops "bc", "bcde") cuts at the same place: stop now.
  if (match != std::string::npos && match <= partial) {  // npos partial: none pending
    r.emit = held_.substr(0, match);
    r.stopped = stopped_ = true;
    held_.clear();
    return r;
  }
  const size_t keep_from = std::min(partial, held_.size());
  r.emit = held_.substr(0, keep_from);
  held_.erase(0, keep_from);
  return r;
}

std::string StopMatcher::flush() {
  if (stopped_) return "";
  std::string out = std::exchange(held_, {});
  // No more text can complete the longer stop we were waiting on, but a shorter one
  // inside the tail may be complete already.
  if (const size_t match = first_match(out); match != std::string::npos) {
    out.resize(match);
    stopped_ = true;
  }
  return out;
}

}  // namespace oscar::serve
