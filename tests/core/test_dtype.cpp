#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "oscar/core/dtype.h"

namespace oscar {
namespace {

float bits_to_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

TEST(Dtype, Fp16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_f32(fp16{uint16_t(h)});
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(f)))) << h;
      continue;
    }
    EXPECT_EQ(f32_to_fp16(f).bits, h) << "fp16 bits " << h;
  }
}

TEST(Dtype, Fp16KnownValues) {
  EXPECT_EQ(fp16_to_f32(fp16{0x3c00}), 1.0f);
  EXPECT_EQ(fp16_to_f32(fp16{0xc000}), -2.0f);
  EXPECT_EQ(fp16_to_f32(fp16{0x7bff}), 65504.0f);
  EXPECT_EQ(fp16_to_f32(fp16{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(fp16_to_f32(fp16{0x7c00})));
  EXPECT_EQ(f32_to_fp16(1e6f).bits, 0x7c00);   // overflow to inf
  EXPECT_EQ(f32_to_fp16(1e-9f).bits, 0x0000);  // underflow to zero
}

// f32 -> fp16 must pick the nearest fp16 (ties to even): compare with neighbours.
TEST(Dtype, Fp16RoundsToNearest) {
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    const float f = bits_to_f32(rng()) ;
    if (std::isnan(f) || std::abs(f) > 65504.0f) continue;
    const uint16_t h = f32_to_fp16(f).bits;
    const double err = std::abs(double(fp16_to_f32(fp16{h})) - f);
    for (int delta : {-1, 1}) {
      const uint16_t nb = uint16_t(h + delta);
      if ((nb & 0x7fff) >= 0x7c00 || ((nb ^ h) & 0x8000)) continue;
      EXPECT_LE(err, std::abs(double(fp16_to_f32(fp16{nb})) - f)) << f;
    }
  }
}

TEST(Dtype, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000)).bits, 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000)).bits, 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808001)).bits, 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(INFINITY))));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_f32(bf16{uint16_t(b)});
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_bf16(f).bits, b);
    }
  }
}

}  // namespace
}  // namespace oscar
