// Helpers for GGUF tests: building metadata values and a small file holding every type.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "oscar/formats/gguf.h"

namespace oscar::gguf::test {

inline Value make_u(ValueType t, uint64_t u) {
  Value v;
  v.type = t;
  v.u = u;
  return v;
}
inline Value make_i(ValueType t, int64_t i) {
  Value v;
  v.type = t;
  v.i = i;
  return v;
}
inline Value make_f(ValueType t, double f) {
  Value v;
  v.type = t;
  v.f = f;
  return v;
}
inline Value make_s(std::string s) {
  Value v;
  v.type = ValueType::string;
  v.s = std::move(s);
  return v;
}
inline Value make_array(ValueType elem, std::vector<Value> items) {
  Value v;
  v.type = ValueType::array;
  v.elem_type = elem;
  v.array = std::move(items);
  return v;
}

// A writer with one key of every value type, arrays of numbers, strings and arrays,
// and two small tensors. The last tensor is 32 bytes, so the file ends exactly at the
// end of its data (no trailing padding): every shorter prefix is a truncated file.
inline GgufWriter small_writer() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set("t.u8", make_u(ValueType::u8, 200));
  w.set("t.i8", make_i(ValueType::i8, -100));
  w.set("t.u16", make_u(ValueType::u16, 65000));
  w.set("t.i16", make_i(ValueType::i16, -32000));
  w.set("t.u32", make_u(ValueType::u32, 4000000000u));
  w.set("t.i32", make_i(ValueType::i32, -2000000000));
  w.set("t.f32", make_f(ValueType::f32, 0.125));
  w.set_bool("t.bool", true);
  w.set("t.u64", make_u(ValueType::u64, 0xfedcba9876543210ull));
  w.set("t.i64", make_i(ValueType::i64, -0x123456789abcdefll));
  w.set("t.f64", make_f(ValueType::f64, 3.141592653589793));
  w.set_string("t.string", std::string("h\xc3\xa9llo\0world", 12));
  w.set("t.ints", make_array(ValueType::i32, {make_i(ValueType::i32, 1), make_i(ValueType::i32, -2)}));
  w.set_string_array("t.strings", {"a", "", "bc"});
  w.set("t.nested", make_array(ValueType::array, {make_array(ValueType::u8, {make_u(ValueType::u8, 7)}),
                                                  make_array(ValueType::string, {make_s("x")})}));
  w.set("t.empty", make_array(ValueType::f32, {}));
  std::vector<uint8_t> q(18 * 2);  // two Q4_0 blocks
  for (size_t i = 0; i < q.size(); ++i) q[i] = uint8_t(i * 7);
  q[0] = 0x00, q[1] = 0x3c, q[18] = 0x00, q[19] = 0xbc;  // d = 1, -1
  w.add_tensor("blk.0.q", GgmlType::q4_0, {32, 2}, q);
  std::vector<uint8_t> f(32);
  for (size_t i = 0; i < f.size(); ++i) f[i] = uint8_t(i);
  w.add_tensor("blk.0.f", GgmlType::f32, {8}, f);
  return w;
}

}  // namespace oscar::gguf::test
