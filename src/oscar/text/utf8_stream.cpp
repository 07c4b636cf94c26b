#include "oscar/text/utf8_stream.h"

#include <utility>

namespace oscar {

std::string Utf8Stream::push(const std::string& bytes) {
  pending_ += bytes;
  // Find the end of the last complete character.
  size_t end = pending_.size();
  size_t i = end;
  while (i > 0 && end - i < 4) {
    const auto c = static_cast<unsigned char>(pending_[i - 1]);
    if ((c & 0xC0) != 0x80) {  // a lead byte (or ASCII) at i-1
      const size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
      if (end - (i - 1) < need) end = i - 1;  // incomplete: hold it back
      break;
    }
    --i;
  }
  std::string out = pending_.substr(0, end);
  pending_.erase(0, end);
  return out;
}

std::string Utf8Stream::flush() { return std::exchange(pending_, {}); }

}  // namespace oscar
