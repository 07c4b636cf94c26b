// GPT-2 byte-level alphabet: every byte maps to one printable Unicode character, so
// BPE vocabularies can store arbitrary bytes as text ("Ġ" is the space byte 0x20).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace oscar::byte_level {

// UTF-8 text of the character that stands for byte `b`.
const std::string& byte_to_text(uint8_t b);

// Appends the byte-level text of `bytes` (any bytes, valid UTF-8 or not) to `out`.
void encode_append(std::string_view bytes, std::string& out);

// Inverse of encode: the raw bytes behind byte-level `text`, or nullopt when `text`
// holds a character outside the 256-character alphabet (or is not valid UTF-8).
std::optional<std::string> decode(std::string_view text);

}  // namespace oscar::byte_level
