// PCRE2_MATCH_INVALID_UTF lets the same compiled patterns run on arbitrary bytes
// (text from outside need not be valid UTF-8). Matching uses the JIT when available,
// and falls back to the interpreter (heap-backed) if a match outgrows the JIT stack.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "oscar/text/pretokenizer.h"

#include <pcre2.h>

#include "oscar/core/error.h"

namespace oscar {

struct PreTokenizer::Stage {
  pcre2_code* code = nullptr;
  bool jit = false;
  std::string pattern;
  ~Stage() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int err) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(err, buf, sizeof(buf));
  return std::string(reinterpret_cast<const char*>(buf));
}

// Owns the per-call PCRE2 state; compiled patterns themselves are shared read-only.
class Matcher {
 public:
  Matcher() : data_(pcre2_match_data_create(1, nullptr)) {
    if (data_ == nullptr) fail("pre-tokenizer: out of memory for PCRE2 match data");
  }
  ~Matcher() { pcre2_match_data_free(data_); }
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  // Next match of `stage` in `subject` at or after `start`: {begin, end}, or {npos, npos}.
  std::pair<size_t, size_t> next(const PreTokenizer::Stage& stage, std::string_view subject, size_t start) {
    const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
    int rc = pcre2_match(stage.code, s, subject.size(), start, PCRE2_NOTEMPTY, data_, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(stage.code, s, subject.size(), start, PCRE2_NOTEMPTY | PCRE2_NO_JIT, data_, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return {std::string_view::npos, std::string_view::npos};
    if (rc < 0) fail("pre-tokenizer: PCRE2 match failed ({}) for pattern {}", pcre2_message(rc), stage.pattern);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data_);
    return {ov[0], ov[1]};
  }

 private:
  pcre2_match_data* data_;
};

}  // namespace

PreTokenizer::PreTokenizer(const std::vector<std::string>& regexes) {
  for (const std::string& re : regexes) {
    auto stage = std::make_shared<Stage>();
    stage->pattern = re;
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    stage->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset, nullptr);
    if (stage->code == nullptr) {
      fail("pre-tokenizer: cannot compile regex {} at offset {}: {}", re, err_offset, pcre2_message(err));
    }
    // Without JIT support pcre2_match simply interprets; that is slower, not wrong.
    stage->jit = pcre2_jit_compile(stage->code, PCRE2_JIT_COMPLETE) == 0;
    stages_.push_back(std::move(stage));
  }
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (!text.empty()) pieces.push_back(text);
  Matcher m;
  std::vector<std::string_view> next;
  for (const auto& stage : stages_) {
    next.clear();
    for (std::string_view piece : pieces) {
      size_t pos = 0;
      while (pos < piece.size()) {
        const auto [b, e] = m.next(*stage, piece, pos);
        if (b == std::string_view::npos) break;
        if (b > pos) next.push_back(piece.substr(pos, b - pos));  // the gap before the match
        next.push_back(piece.substr(b, e - b));
        pos = e;
      }
      if (pos < piece.size()) next.push_back(piece.substr(pos));
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace oscar
