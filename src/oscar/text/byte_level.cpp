// The table follows GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for
// themselves; the other 68 bytes (controls, space, 0x7F-0xA0, 0xAD) are moved, in
// byte order, to U+0100 and up.
#include "oscar/text/byte_level.h"

#include <array>

namespace oscar::byte_level {
namespace {

bool is_self_mapped(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

std::string utf8_of(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {  // the alphabet stays below U+0800: two bytes suffice
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

struct Tables {
  std::array<std::string, 256> text;      // byte -> UTF-8 text
  std::array<int16_t, 512> byte_of_cp{};  // code point -> byte, -1 outside the alphabet
  Tables() {
    byte_of_cp.fill(-1);
    uint32_t next_moved = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = is_self_mapped(b) ? static_cast<uint32_t>(b) : next_moved++;
      text[b] = utf8_of(cp);
      byte_of_cp[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_to_text(uint8_t b) { return tables().text[b]; }

void encode_append(std::string_view bytes, std::string& out) {
  const Tables& t = tables();
  for (char c : bytes) out += t.text[static_cast<uint8_t>(c)];
}

std::optional<std::string> decode(std::string_view text) {
  const Tables& t = tables();
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<uint8_t>(text[i]);
    uint32_t cp = 0;
    if (b0 < 0x80) {
      cp = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < text.size() &&
               (static_cast<uint8_t>(text[i + 1]) & 0xC0) == 0x80) {
      cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return std::nullopt;  // three-byte and longer characters lie outside the alphabet
    }
    if (cp >= t.byte_of_cp.size() || t.byte_of_cp[cp] < 0) return std::nullopt;
    out += static_cast<char>(t.byte_of_cp[cp]);
  }
  return out;
}

}  // namespace oscar::byte_level
