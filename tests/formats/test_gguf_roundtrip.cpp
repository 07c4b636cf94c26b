// GGUF writer -> reader round trips: every value type, arrays (of strings, nested, empty),
// tensors and their data, alignment, writing through a file, and copying a file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "gguf_test_values.h"
#include "oscar/core/error.h"
#include "oscar/formats/gguf.h"

namespace oscar::gguf {
namespace {

using test::make_array;
using test::make_u;

void expect_same_value(const Value& a, const Value& b, const std::string& where) {
  ASSERT_EQ(a.type, b.type) << where;
  switch (a.type) {
    case ValueType::f32: EXPECT_EQ(float(a.f), float(b.f)) << where; break;
    case ValueType::f64: EXPECT_EQ(a.f, b.f) << where; break;
    case ValueType::string: EXPECT_EQ(a.s, b.s) << where; break;
    case ValueType::array:
      ASSERT_EQ(a.elem_type, b.elem_type) << where;
      ASSERT_EQ(a.array.size(), b.array.size()) << where;
      for (size_t k = 0; k < a.array.size(); ++k) expect_same_value(a.array[k], b.array[k], where + "[]");
      break;
    default:
      EXPECT_EQ(a.u, b.u) << where;
      EXPECT_EQ(a.i, b.i) << where;
  }
}

void expect_same_file(const GgufFile& a, const GgufFile& b) {
  ASSERT_EQ(a.metadata().size(), b.metadata().size());
  for (size_t k = 0; k < a.metadata().size(); ++k) {
    EXPECT_EQ(a.metadata()[k].first, b.metadata()[k].first);
    expect_same_value(a.metadata()[k].second, b.metadata()[k].second, a.metadata()[k].first);
  }
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t k = 0; k < a.tensors().size(); ++k) {
    const TensorInfo &x = a.tensors()[k], &y = b.tensors()[k];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.ne, y.ne);
    EXPECT_EQ(x.type, y.type);
    ASSERT_EQ(x.n_bytes, y.n_bytes);
    EXPECT_EQ(0, std::memcmp(x.data, y.data, x.n_bytes)) << x.name;
  }
}

TEST(GgufRoundTrip, EveryValueTypeAndTensor) {
  const GgufWriter w = test::small_writer();
  const std::vector<uint8_t> bytes = w.to_bytes();
  const GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);

  // Insertion order is kept.
  ASSERT_EQ(f.metadata().size(), 17u);
  EXPECT_EQ(f.metadata()[0].first, "general.architecture");
  EXPECT_EQ(f.metadata()[1].first, "t.u8");
  EXPECT_EQ(f.metadata()[16].first, "t.empty");

  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("t.u8"), 200);
  EXPECT_EQ(f.get_int("t.i8"), -100);
  EXPECT_EQ(f.get_int("t.u16"), 65000);
  EXPECT_EQ(f.get_int("t.i16"), -32000);
  EXPECT_EQ(f.get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("t.i32"), -2000000000);
  EXPECT_EQ(f.get_float("t.f32"), 0.125);
  EXPECT_TRUE(f.get_bool("t.bool", false));
  EXPECT_EQ(f.get("t.u64").u, 0xfedcba9876543210ull);
  EXPECT_THROW(f.get_int("t.u64"), Error);  // does not fit int64
  EXPECT_EQ(f.get_int("t.i64"), -0x123456789abcdefll);
  EXPECT_EQ(f.get_float("t.f64"), 3.141592653589793);
  EXPECT_EQ(f.get_string("t.string"), std::string("h\xc3\xa9llo\0world", 12));
  EXPECT_EQ(f.get_int_array("t.ints"), (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(f.get_float_array("t.ints"), (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(f.get_string_array("t.strings"), (std::vector<std::string>{"a", "", "bc"}));
  const Value& nested = f.get("t.nested");
  ASSERT_EQ(nested.elem_type, ValueType::array);
  ASSERT_EQ(nested.array.size(), 2u);
  EXPECT_EQ(nested.array[0].elem_type, ValueType::u8);
  EXPECT_EQ(nested.array[0].array[0].u, 7u);
  EXPECT_EQ(nested.array[1].array[0].s, "x");
  EXPECT_TRUE(f.get("t.empty").array.empty());
  EXPECT_EQ(f.get("t.empty").elem_type, ValueType::f32);

  // Fallbacks apply to missing keys only; a wrong type is an error naming the key.
  EXPECT_EQ(f.get_int("missing", 42), 42);
  EXPECT_EQ(f.get_string("missing", "x"), "x");
  EXPECT_EQ(f.get_float("missing", 2.5), 2.5);
  EXPECT_FALSE(f.get_bool("missing", false));
  EXPECT_THROW(f.get_int("t.string", 1), Error);
  try {
    f.get_string("t.u8");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mem: metadata key 't.u8'"), std::string::npos) << e.what();
  }
  try {
    f.get("nope");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "mem: missing metadata key 'nope'");
  }

  ASSERT_EQ(f.tensors().size(), 2u);
  const TensorInfo& q = f.tensor("blk.0.q");
  EXPECT_EQ(q.type, GgmlType::q4_0);
  EXPECT_EQ(q.ne, (std::vector<uint64_t>{32, 2}));
  EXPECT_EQ(q.n_elements, 64u);
  EXPECT_EQ(q.n_bytes, 36u);
  EXPECT_EQ(q.offset, 0u);
  const TensorInfo& t = f.tensor("blk.0.f");
  EXPECT_EQ(t.offset, 64u);  // 36 bytes padded to 32
  EXPECT_EQ((t.data - bytes.data()) % 32, 0);
  EXPECT_EQ(bytes.size(), f.data_offset() + 64 + 32);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  EXPECT_THROW(f.tensor("nope"), Error);

  // Q4_0 with d = 1: element j = low nibble of qs[j] - 8.
  const std::vector<float> deq = f.dequantize(q);
  ASSERT_EQ(deq.size(), 64u);
  EXPECT_EQ(deq[0], float(int((2 * 7) & 0x0f) - 8));
  EXPECT_EQ(deq[32 + 17], -float(int(uint8_t(21 * 7) >> 4) - 8));

  // Writing the parsed file again reproduces the same bytes.
  GgufWriter again;
  again.copy_from(f);
  EXPECT_EQ(again.to_bytes(), bytes);
}

TEST(GgufRoundTrip, AlignmentAndFileWrite) {
  GgufWriter w = test::small_writer();
  w.set_alignment(64);
  const auto dir = std::filesystem::temp_directory_path() / ("oscar_gguf_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "x.gguf").string();
  w.write(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get_int("general.alignment"), 64);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.tensor("blk.0.f").offset, 64u);
  const std::vector<uint8_t> bytes = w.to_bytes();
  const GgufFile g = GgufFile::parse(bytes.data(), bytes.size(), "mem");
  expect_same_file(f, g);
  std::filesystem::remove_all(dir);
}

TEST(GgufRoundTrip, SetReplacesInPlace) {
  GgufWriter w;
  w.set_u32("a", 1);
  w.set_u32("b", 2);
  w.set_string("a", "now a string");
  const auto bytes = w.to_bytes();
  const GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "mem");
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0].first, "a");
  EXPECT_EQ(f.get_string("a"), "now a string");
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufWriter, RejectsInconsistentInput) {
  GgufWriter w;
  EXPECT_THROW(w.add_tensor("t", GgmlType::q4_0, {32}, std::vector<uint8_t>(17)), Error);  // wrong size
  EXPECT_THROW(w.add_tensor("t", GgmlType::q4_0, {31}, std::vector<uint8_t>(18)), Error);  // partial block
  EXPECT_THROW(w.add_tensor("t", GgmlType::f32, {}, {}), Error);
  EXPECT_THROW(w.add_tensor("t", GgmlType::f32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)), Error);
  EXPECT_THROW(w.add_tensor("t", GgmlType::f32, {0}, {}), Error);
  EXPECT_THROW(w.add_tensor("t", GgmlType(99), {1}, std::vector<uint8_t>(4)), Error);
  w.add_tensor("t", GgmlType::f32, {1}, std::vector<uint8_t>(4));
  EXPECT_THROW(w.add_tensor("t", GgmlType::f32, {1}, std::vector<uint8_t>(4)), Error);  // duplicate
  EXPECT_THROW(w.set_alignment(0), Error);
  EXPECT_THROW(w.set_alignment(48), Error);
  EXPECT_THROW(w.set("general.alignment", test::make_s("32")), Error);

  GgufWriter bad_range;
  bad_range.set("x", make_u(ValueType::u8, 256));
  EXPECT_THROW(bad_range.to_bytes(), Error);
  GgufWriter mixed;  // array elements must all have the array's element type
  mixed.set("x", make_array(ValueType::u8, {make_u(ValueType::u8, 1), make_u(ValueType::u16, 2)}));
  EXPECT_THROW(mixed.to_bytes(), Error);
}

TEST(GgufValue, Display) {
  EXPECT_EQ(make_u(ValueType::u32, 7).to_display(), "7");
  EXPECT_EQ(test::make_f(ValueType::f32, double(1e-5f)).to_display(), "1e-05");
  EXPECT_EQ(test::make_s("a\"b\n").to_display(), "\"a\\\"b\\n\"");
  std::vector<Value> items;
  for (int k = 0; k < 10; ++k) items.push_back(make_u(ValueType::u8, uint64_t(k)));
  EXPECT_EQ(make_array(ValueType::u8, items).to_display(3), "[0, 1, 2, ...] (10 x u8)");
  EXPECT_EQ(test::make_s(std::string(200, 'x')).to_display().size(), 122u + std::string("... (200 bytes)").size());
}

}  // namespace
}  // namespace oscar::gguf
