// gguf::Value: typed access to one metadata value and its one-line display form.
#include <fmt/format.h>

#include <limits>

#include "oscar/core/error.h"
#include "oscar/formats/gguf.h"

namespace oscar::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::u8: return "u8";
    case ValueType::i8: return "i8";
    case ValueType::u16: return "u16";
    case ValueType::i16: return "i16";
    case ValueType::u32: return "u32";
    case ValueType::i32: return "i32";
    case ValueType::f32: return "f32";
    case ValueType::boolean: return "bool";
    case ValueType::string: return "string";
    case ValueType::array: return "array";
    case ValueType::u64: return "u64";
    case ValueType::i64: return "i64";
    case ValueType::f64: return "f64";
  }
  return "unknown";
}

namespace {

bool is_unsigned(ValueType t) {
  return t == ValueType::u8 || t == ValueType::u16 || t == ValueType::u32 || t == ValueType::u64;
}
bool is_signed(ValueType t) {
  return t == ValueType::i8 || t == ValueType::i16 || t == ValueType::i32 || t == ValueType::i64;
}

// Printable form of a string value: quoted, control characters escaped, long ones cut.
std::string display_string(const std::string& s) {
  constexpr size_t max_chars = 120;
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < max_chars; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += char(c);
    }
  }
  out += '"';
  if (s.size() > max_chars) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

}  // namespace

bool Value::is_integer() const { return is_unsigned(type) || is_signed(type); }

bool Value::is_float() const { return type == ValueType::f32 || type == ValueType::f64; }

int64_t Value::as_int(std::string_view key) const {
  if (is_unsigned(type) || type == ValueType::boolean) {
    if (u > uint64_t(std::numeric_limits<int64_t>::max()))
      fail("metadata key '{}': value {} does not fit a signed 64-bit integer", key, u);
    return int64_t(u);
  }
  if (is_signed(type)) return i;
  fail("metadata key '{}' is {}, expected an integer", key, value_type_name(type));
}

double Value::as_float(std::string_view key) const {
  if (is_float()) return f;
  if (is_unsigned(type)) return double(u);
  if (is_signed(type)) return double(i);
  fail("metadata key '{}' is {}, expected a number", key, value_type_name(type));
}

bool Value::as_bool(std::string_view key) const {
  if (type == ValueType::boolean) return u != 0;
  fail("metadata key '{}' is {}, expected bool", key, value_type_name(type));
}

const std::string& Value::as_string(std::string_view key) const {
  if (type == ValueType::string) return s;
  fail("metadata key '{}' is {}, expected string", key, value_type_name(type));
}

std::string Value::to_display(size_t max_array_items) const {
  switch (type) {
    case ValueType::u8:
    case ValueType::u16:
    case ValueType::u32:
    case ValueType::u64: return fmt::format("{}", u);
    case ValueType::i8:
    case ValueType::i16:
    case ValueType::i32:
    case ValueType::i64: return fmt::format("{}", i);
    case ValueType::f32: return fmt::format("{}", float(f));  // shortest form of the stored f32
    case ValueType::f64: return fmt::format("{}", f);
    case ValueType::boolean: return u ? "true" : "false";
    case ValueType::string: return display_string(s);
    case ValueType::array: {
      std::string out = "[";
      for (size_t k = 0; k < array.size() && k < max_array_items; ++k) {
        if (k) out += ", ";
        out += array[k].to_display(max_array_items);
      }
      if (array.size() > max_array_items) out += ", ...";
      out += fmt::format("] ({} x {})", array.size(), value_type_name(elem_type));
      return out;
    }
  }
  return "?";
}

}  // namespace oscar::gguf
