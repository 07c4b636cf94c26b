// Incremental stop-string matching over streamed text (bytes). The output is the
// text cut right before the earliest-starting occurrence of any stop string, the
// same however the text is split into pieces; a possible partial match is held back.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace oscar::serve {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);  // empty strings are dropped

  struct Result {
    std::string emit;      // safe to send now
    bool stopped = false;  // a stop string occurred: `emit` ends right before it
  };
  // Feeds the next piece. Once stopped, every later push returns {"", true}.
  Result push(std::string_view text);
  // At the end of generation: the held-back tail. It is cut (and stopped() turns true)
  // when it holds a stop that was waiting on a longer, earlier-starting one.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  size_t first_match(std::string_view text) const;    // start of the earliest complete stop, or npos
  size_t first_partial(std::string_view text) const;  // earliest p with text[p..] a proper prefix of a stop, or npos

  std::vector<std::string> stops_;
  size_t max_len_ = 0;  // bytes of the longest stop: held_ stays shorter than this
  std::string held_;    // received but not yet emitted
  bool stopped_ = false;
};

}  // namespace oscar::serve
