// Regex pre-tokenizer (PCRE2, UTF + Unicode properties): cuts text into the pieces
// that BPE then encodes one by one. Thread-safe: split() may run concurrently.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace oscar {

class PreTokenizer {
 public:
  // Compiles `regexes` (stages, applied in order); throws oscar::Error naming the
  // pattern that PCRE2 rejects.
  explicit PreTokenizer(const std::vector<std::string>& regexes);

  // Pieces of `text`, in order, covering it exactly. Each stage splits every piece of
  // the stage before: both the matches and the text between them become pieces (HF's
  // "isolated" behaviour). A match never looks past the end of its piece. Invalid UTF-8
  // is allowed: such bytes never match a pattern, so they end up in the gap pieces.
  std::vector<std::string_view> split(std::string_view text) const;

  struct Stage;  // one compiled pattern (opaque: keeps pcre2.h out of this header)

 private:
  std::vector<std::shared_ptr<const Stage>> stages_;
};

}  // namespace oscar
