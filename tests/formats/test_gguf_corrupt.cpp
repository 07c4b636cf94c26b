// Hostile and damaged GGUF files: every one must raise oscar::Error naming the problem,
// never crash, over-read or allocate without bound (run under -DOSCAR_SANITIZE=ON too).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "gguf_test_values.h"
#include "oscar/core/error.h"
#include "oscar/formats/gguf.h"

namespace oscar::gguf {
namespace {

// Parses an exact-size heap copy so that sanitizers see any read past the end.
void parse_copy(const std::vector<uint8_t>& bytes, size_t n) {
  const std::vector<uint8_t> copy(bytes.begin(), bytes.begin() + ptrdiff_t(n));
  GgufFile::parse(copy.data(), copy.size(), "corrupt.gguf");
}

// Expects parse to fail with a message containing `needle` (and the file name).
void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  try {
    parse_copy(bytes, bytes.size());
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("corrupt.gguf"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;
  }
}

// Little-endian byte builder for hand-made headers.
struct Bytes {
  std::vector<uint8_t> b;
  Bytes& raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
    return *this;
  }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& str(const std::string& s) { return u64(s.size()).raw(s.data(), s.size()); }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF", 4).u32(version).u64(n_tensors).u64(n_kv);
  }
  Bytes& pad(size_t to) {
    b.resize((b.size() + to - 1) / to * to, 0);
    return *this;
  }
};

// One tensor info record.
Bytes& tensor_info(Bytes& x, const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
  x.str(name).u32(uint32_t(ne.size()));
  for (uint64_t d : ne) x.u64(d);
  return x.u32(type).u64(offset);
}

TEST(GgufCorrupt, EveryTruncationThrows) {
  const std::vector<uint8_t> bytes = test::small_writer().to_bytes();
  GgufFile::parse(bytes.data(), bytes.size(), "whole");  // the whole file is valid
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(parse_copy(bytes, n), Error) << "truncated to " << n << " of " << bytes.size() << " bytes";
  }
}

TEST(GgufCorrupt, RandomByteDamageNeverCrashes) {
  const std::vector<uint8_t> bytes = test::small_writer().to_bytes();
  std::mt19937 rng(1234);
  int parsed = 0, rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> x = bytes;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % x.size();
      x[at] = (rng() % 3 == 0) ? uint8_t(0xff) : uint8_t(rng());
    }
    try {
      const GgufFile f = GgufFile::parse(x.data(), x.size(), "damaged");
      for (const TensorInfo& t : f.tensors())
        if (ggml_type_dequantizable(t.type)) f.dequantize(t);
      ++parsed;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(parsed, 0);  // damage in tensor data or values is legal
}

TEST(GgufCorrupt, BadMagicAndVersion) {
  Bytes x;
  x.raw("GGUG", 4).u32(3).u64(0).u64(0);
  expect_error(x.b, "bad magic");
  expect_error(Bytes().header(0, 0, 1).b, "unsupported GGUF version 1");
  expect_error(Bytes().header(0, 0, 4).b, "unsupported GGUF version 4");
  expect_error(Bytes().header(0, 0, 0x03000000).b, "big-endian");
  EXPECT_NO_THROW(parse_copy(Bytes().header(0, 0, 2).b, 24));
  EXPECT_NO_THROW(parse_copy(Bytes().header(0, 0, 3).b, 24));
}

TEST(GgufCorrupt, HugeCounts) {
  expect_error(Bytes().header(0, ~0ull).b, "metadata count");
  expect_error(Bytes().header(~0ull, 0).b, "tensor count");
  expect_error(Bytes().header(1ull << 40, 1).str("k").u32(4).u32(1).b, "tensor count");
  Bytes many;  // counts the file could hold, but far beyond any real model
  many.header(0, (1ull << 20) + 1);
  many.b.resize(many.b.size() + 14 * ((1ull << 20) + 1), 0);
  expect_error(many.b, "metadata count 1048577 exceeds the limit");
  Bytes many_t;
  many_t.header((1ull << 20) + 1, 0);
  many_t.b.resize(many_t.b.size() + 33 * ((1ull << 20) + 1), 0);
  expect_error(many_t.b, "tensor count 1048577 exceeds the limit");
  // A count that just fits the minimal entry size passes the first check and then hits the end.
  Bytes x;
  x.header(0, 2).str("k").u32(0);
  x.b.push_back(1);
  x.b.resize(x.b.size() + 12, 0);  // one byte short of a second entry
  EXPECT_THROW(parse_copy(x.b, x.b.size()), Error);
}

TEST(GgufCorrupt, HugeStringLengths) {
  expect_error(Bytes().header(0, 1).u64(~0ull).raw("abcdefgh", 8).b, "string length");
  expect_error(Bytes().header(0, 1).u64(1ull << 40).raw("abcdefgh", 8).b, "string length");
  Bytes v;
  v.header(0, 1).str("key").u32(uint32_t(ValueType::string)).u64(1000).raw("short", 5);
  expect_error(v.b, "string length 1000");
  Bytes t;
  t.header(1, 0).u64(~0ull - 3);
  t.b.resize(t.b.size() + 32, 0);
  expect_error(t.b, "tensor #0 name");
}

TEST(GgufCorrupt, HugeAndDeepArrays) {
  Bytes a;
  a.header(0, 1).str("arr").u32(uint32_t(ValueType::array)).u32(uint32_t(ValueType::u64)).u64(1ull << 61);
  a.u64(1);
  expect_error(a.b, "array of 2305843009213693952 u64 values cannot fit");
  Bytes s;  // strings take at least 8 bytes each: 100 of them cannot fit in 100 bytes
  s.header(0, 1).str("arr").u32(uint32_t(ValueType::array)).u32(uint32_t(ValueType::string)).u64(100);
  s.b.resize(s.b.size() + 100, 0);
  expect_error(s.b, "cannot fit");
  Bytes d;  // arrays of arrays of ... beyond the depth limit
  d.header(0, 1).str("deep").u32(uint32_t(ValueType::array));
  for (int k = 0; k < 20; ++k) d.u32(uint32_t(ValueType::array)).u64(1);
  d.b.resize(d.b.size() + 64, 0);
  expect_error(d.b, "nested deeper");
  Bytes big;  // fits in the file, but over the per-file element budget
  big.header(0, 1).str("big").u32(uint32_t(ValueType::array)).u32(uint32_t(ValueType::u8)).u64(10'000'000);
  big.b.resize(big.b.size() + 10'000'000, 0);
  expect_error(big.b, "limit");
}

TEST(GgufCorrupt, BadValues) {
  expect_error(Bytes().header(0, 1).str("k").u32(13).u32(0).b, "unknown value type 13");
  expect_error(Bytes().header(0, 1).str("k").u32(uint32_t(ValueType::array)).u32(99).u64(0).b,
               "unknown value type 99");
  Bytes b;
  b.header(0, 1).str("flag").u32(uint32_t(ValueType::boolean));
  b.b.push_back(2);
  expect_error(b.b, "bool value 2");
  Bytes dup;
  dup.header(0, 2).str("k").u32(uint32_t(ValueType::u32)).u32(1).str("k").u32(uint32_t(ValueType::u32)).u32(2);
  expect_error(dup.b, "duplicate metadata key 'k'");
}

// A header with one metadata key (alignment) and the given tensor infos, data after.
std::vector<uint8_t> file_with(uint32_t alignment, const std::vector<std::tuple<std::string, std::vector<uint64_t>,
                                                                                uint32_t, uint64_t>>& infos,
                               size_t data_bytes) {
  Bytes x;
  x.header(infos.size(), 1).str("general.alignment").u32(uint32_t(ValueType::u32)).u32(alignment);
  for (const auto& [name, ne, type, offset] : infos) tensor_info(x, name, ne, type, offset);
  x.pad(alignment ? alignment : 1);
  x.b.resize(x.b.size() + data_bytes, 0);
  return x.b;
}

TEST(GgufCorrupt, BadTensorInfos) {
  const auto ok = file_with(32, {{"w", {8, 2}, 0, 0}}, 64);
  EXPECT_NO_THROW(parse_copy(ok, ok.size()));
  expect_error(file_with(32, {{"w", {1, 1, 1, 1, 1}, 0, 0}}, 64), "tensor 'w': n_dims = 5");
  expect_error(file_with(32, {{"w", {}, 0, 0}}, 64), "n_dims = 0");
  expect_error(file_with(32, {{"w", {8, 0}, 0, 0}}, 64), "tensor 'w': ne[1] = 0");
  expect_error(file_with(32, {{"w", {1ull << 32, 1ull << 32}, 0, 0}}, 64), "element count overflows");
  expect_error(file_with(32, {{"w", {1ull << 62, 4}, 0, 0}}, 64), "element count overflows");
  expect_error(file_with(32, {{"w", {1ull << 61, 2}, 0, 0}}, 64), "byte size overflows");  // 2^62 f32 = 2^64 bytes
  expect_error(file_with(32, {{"w", {8}, 4, 0}}, 64), "unknown ggml type 4");
  expect_error(file_with(32, {{"w", {8}, 1000, 0}}, 64), "unknown ggml type 1000");
  expect_error(file_with(32, {{"w", {33}, 2, 0}}, 64), "not a multiple of the Q4_0 block size");
  expect_error(file_with(32, {{"w", {8}, 0, 16}}, 64), "offset 16 is not a multiple of the alignment 32");
  expect_error(file_with(32, {{"w", {8}, 0, 64}}, 64), "exceeds file size");
  expect_error(file_with(32, {{"w", {32}, 0, 0}}, 64), "exceeds file size");
  expect_error(file_with(32, {{"w", {8}, 0, ~0ull - 31}}, 64), "exceeds file size");
  expect_error(file_with(32, {{"w", {8}, 0, 0}, {"w", {8}, 0, 32}}, 64), "duplicate tensor name 'w'");
}

TEST(GgufCorrupt, BadAlignment) {
  expect_error(file_with(0, {}, 0), "general.alignment = 0");
  expect_error(file_with(48, {}, 0), "general.alignment = 48");
  Bytes s;
  s.header(0, 1).str("general.alignment").u32(uint32_t(ValueType::string)).str("32");
  expect_error(s.b, "general.alignment is string");
  const auto ok = file_with(64, {{"w", {16}, 0, 0}}, 64);
  const GgufFile f = GgufFile::parse(ok.data(), ok.size(), "ok");
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
}

}  // namespace
}  // namespace oscar::gguf
