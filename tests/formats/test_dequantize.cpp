// Dequantization against gguf-py: tests/data/quant_fixture.gguf holds, per type, a 2x512
// tensor and gguf-py's dequantization of it (`<type>.ref`); see
// tests/reference/make_quant_fixture.py. Bound: |x - ref| <= 1e-6 (1 + |ref|), every element.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "oscar/core/error.h"
#include "oscar/formats/ggml_type.h"
#include "oscar/formats/gguf.h"

namespace {

using oscar::GgmlType;

const std::string fixture_path = std::string(OSCAR_SOURCE_DIR) + "/tests/data/quant_fixture.gguf";

class DequantizeVsGgufPy : public ::testing::TestWithParam<const char*> {};

TEST_P(DequantizeVsGgufPy, MatchesReferenceEveryElement) {
  const auto file = oscar::gguf::GgufFile::open(fixture_path);
  const std::string name = GetParam();
  const auto& q = file.tensor(name);
  const auto& ref_info = file.tensor(name + ".ref");
  EXPECT_STREQ(oscar::ggml_type_name(q.type), name.c_str());
  ASSERT_EQ(ref_info.type, GgmlType::f32);
  ASSERT_EQ(q.ne, ref_info.ne);
  const std::vector<float> x = file.dequantize(q);
  const std::vector<float> ref = file.dequantize(ref_info);
  ASSERT_EQ(x.size(), ref.size());
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(std::isfinite(ref[i])) << name << " element " << i;
    const double excess = std::fabs(double(x[i]) - ref[i]) - 1e-6 * (1.0 + std::fabs(ref[i]));
    if (i == 0 || excess > worst) worst = excess, worst_at = i;
  }
  EXPECT_LE(worst, 0.0) << name << ": worst element " << worst_at << " = " << x[worst_at] << ", reference "
                        << ref[worst_at];
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantizeVsGgufPy,
                         ::testing::Values("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K",
                                           "Q5_K", "Q6_K"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

TEST(GgmlType, BlockGeometryMatchesGgml) {
  struct Row { GgmlType t; int64_t elems, bytes; const char* name; };
  const Row rows[] = {
      {GgmlType::f32, 1, 4, "F32"},     {GgmlType::f16, 1, 2, "F16"},     {GgmlType::bf16, 1, 2, "BF16"},
      {GgmlType::q4_0, 32, 18, "Q4_0"}, {GgmlType::q4_1, 32, 20, "Q4_1"}, {GgmlType::q5_0, 32, 22, "Q5_0"},
      {GgmlType::q5_1, 32, 24, "Q5_1"}, {GgmlType::q8_0, 32, 34, "Q8_0"}, {GgmlType::q8_1, 32, 40, "Q8_1"},
      {GgmlType::q2_k, 256, 84, "Q2_K"}, {GgmlType::q3_k, 256, 110, "Q3_K"}, {GgmlType::q4_k, 256, 144, "Q4_K"},
      {GgmlType::q5_k, 256, 176, "Q5_K"}, {GgmlType::q6_k, 256, 210, "Q6_K"}, {GgmlType::q8_k, 256, 292, "Q8_K"},
      {GgmlType::i8, 1, 1, "I8"},       {GgmlType::i16, 1, 2, "I16"},     {GgmlType::i32, 1, 4, "I32"},
      {GgmlType::i64, 1, 8, "I64"},     {GgmlType::f64, 1, 8, "F64"},
  };
  for (const Row& r : rows) {
    EXPECT_TRUE(oscar::ggml_type_known(uint32_t(r.t))) << r.name;
    EXPECT_EQ(oscar::ggml_block_elements(r.t), r.elems) << r.name;
    EXPECT_EQ(oscar::ggml_block_bytes(r.t), r.bytes) << r.name;
    EXPECT_STREQ(oscar::ggml_type_name(r.t), r.name);
  }
  EXPECT_EQ(oscar::ggml_row_bytes(GgmlType::q4_k, 512), 288u);
  EXPECT_EQ(oscar::ggml_row_bytes(GgmlType::f32, 0), 0u);
}

TEST(GgmlType, UnknownAndUnsupportedTypes) {
  for (uint32_t raw : {4u, 5u, 16u, 23u, 29u, 31u, 1000u}) {
    EXPECT_FALSE(oscar::ggml_type_known(raw)) << raw;
    EXPECT_THROW(oscar::ggml_block_bytes(GgmlType(raw)), oscar::Error);
  }
  EXPECT_STREQ(oscar::ggml_type_name(GgmlType(77)), "type(77)");
  EXPECT_FALSE(oscar::ggml_type_dequantizable(GgmlType::q2_k));
  EXPECT_FALSE(oscar::ggml_type_dequantizable(GgmlType::i32));
  EXPECT_TRUE(oscar::ggml_type_dequantizable(GgmlType::q6_k));
  uint8_t block[292] = {};
  float out[256];
  EXPECT_THROW(oscar::dequantize_row(GgmlType::q2_k, block, out, 256), oscar::Error);
  EXPECT_THROW(oscar::dequantize_row(GgmlType::q4_0, block, out, 33), oscar::Error);  // not whole blocks
  EXPECT_THROW(oscar::ggml_row_bytes(GgmlType::q4_k, 100), oscar::Error);
}

// Hand-built blocks whose values are easy to state, for the bit placement in the
// 5- and 6-bit formats (the fixture checks the arithmetic on random data).
TEST(Dequantize, Q5_0HighBitsComeFromQhInElementOrder) {
  uint8_t b[22] = {};
  b[0] = 0x00, b[1] = 0x3c;  // d = 1.0 in fp16
  b[2] = 0x01;               // element 0 gets the fifth bit
  b[5] = 0x80;               // bit 31: element 31
  for (int j = 0; j < 16; ++j) b[6 + j] = 0x00;
  float y[32];
  oscar::dequantize_row(GgmlType::q5_0, b, y, 32);
  EXPECT_EQ(y[0], 0.0f);     // 16 - 16
  EXPECT_EQ(y[1], -16.0f);
  EXPECT_EQ(y[31], 0.0f);
  EXPECT_EQ(y[16], -16.0f);
}

TEST(Dequantize, Q6_KScalesPerSixteenElements) {
  uint8_t b[210] = {};
  for (int i = 0; i < 128; ++i) b[i] = 0x00;  // low nibbles 0
  for (int i = 128; i < 192; ++i) b[i] = 0xaa;  // each 2-bit high part = 2 -> q = 32 - 32 = 0
  for (int i = 0; i < 16; ++i) b[192 + i] = uint8_t(int8_t(i - 8));
  b[208] = 0x00, b[209] = 0x3c;  // d = 1
  float y[256];
  oscar::dequantize_row(GgmlType::q6_k, b, y, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], 0.0f) << i;
  for (int i = 128; i < 192; ++i) b[i] = 0x00;  // q = -32 everywhere
  oscar::dequantize_row(GgmlType::q6_k, b, y, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], -32.0f * float(i / 16 - 8)) << i;
}

}  // namespace
