// Bucketing by first byte keeps the scan cheap: special tokens mostly start with '<',
// so ordinary text costs one table lookup per byte.
#include "oscar/text/special_tokens.h"

#include <algorithm>

namespace oscar {

void SpecialTokenMatcher::add(std::string text, int32_t id) {
  if (text.empty()) return;
  auto& bucket = by_first_byte_[static_cast<uint8_t>(text[0])];
  for (const Entry& e : bucket) {
    if (e.text == text) return;  // the first id with a given text wins
  }
  bucket.push_back(Entry{std::move(text), id});
  std::stable_sort(bucket.begin(), bucket.end(),
                   [](const Entry& a, const Entry& b) { return a.text.size() > b.text.size(); });
  ++n_;
}

SpecialTokenMatcher::Match SpecialTokenMatcher::find(std::string_view text, size_t from) const {
  if (n_ == 0) return {};
  for (size_t i = from; i < text.size(); ++i) {
    const auto& bucket = by_first_byte_[static_cast<uint8_t>(text[i])];
    for (const Entry& e : bucket) {
      if (text.compare(i, e.text.size(), e.text) == 0) return Match{i, e.text.size(), e.id};
    }
  }
  return {};
}

}  // namespace oscar
