// Finds special-token text (e.g. "<|im_start|>") inside a string: leftmost match first,
// and the longest token at that position, as HF tokenizers' added-token matching does.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace oscar {

class SpecialTokenMatcher {
 public:
  void add(std::string text, int32_t id);  // empty text is ignored

  struct Match {
    size_t pos = std::string_view::npos;  // npos: none
    size_t len = 0;
    int32_t id = -1;
  };
  // The first special token in `text` at or after `from`.
  Match find(std::string_view text, size_t from) const;
  bool empty() const { return n_ == 0; }

 private:
  struct Entry {
    std::string text;
    int32_t id;
  };
  std::array<std::vector<Entry>, 256> by_first_byte_;  // each list longest first
  size_t n_ = 0;
};

}  // namespace oscar
