// KV codecs: uniform INT2/4/8 with clipping, Lloyd-Max (approx, exact), KIVI keys.
// Three error budgets per codec: round trip per code, fast vs reference, quantized dot vs
// fp32 — on every head_dim/group/clip combination, plus hand-computed layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../test_util.h"
#include "oscar/core/error.h"
#include "oscar/kv/kivi_codec.h"
#include "oscar/kv/lloyd_max.h"
#include "oscar/kv/quant_codec.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {
namespace {

struct Shape {
  int d, G;
};
std::vector<Shape> all_shapes() {
  std::vector<Shape> s;
  for (int d : {32, 64, 128, 256})
    for (int G : {32, 64, 128, 256})
      if (G <= d) s.push_back({d, G});
  return s;
}
const float kRatios[] = {0.0f, 0.92f, 0.96f, 1.0f};

// Rows of several shapes: 0 uniform, 1 gaussian + huge outliers, 2 all positive and
// narrow (zero far outside [0, L]), 3 tiny gaussian.
std::vector<float> make_row(int kind, int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(d));
  switch (kind) {
    case 0: x = test::random_vector(static_cast<size_t>(d), seed); break;
    case 1:
      for (float& v : x) v = n01(rng);
      x[seed % d] = 60.0f;
      x[(seed * 7 + 3) % d] = -300.0f;
      break;
    case 2: x = test::random_vector(static_cast<size_t>(d), seed, 5.0f, 5.5f); break;
    default:
      for (float& v : x) v = 1e-3f * n01(rng);
  }
  return x;
}

// Independent τ: full sort.
float ref_tau(const std::vector<float>& x, float ratio) {
  if (ratio <= 0.0f || ratio >= 1.0f) return INFINITY;
  std::vector<float> a(x.size());
  for (size_t i = 0; i < x.size(); ++i) a[i] = std::fabs(x[i]);
  std::sort(a.begin(), a.end());
  const size_t idx = std::min(size_t(std::floor(double(ratio) * double(x.size()))), x.size() - 1);
  return a[idx];
}

void read_pair(const QuantParams& p, const uint8_t* row, int g, float* a, float* b) {
  fp16 h[2];
  std::memcpy(h, row + quant_code_bytes(p) + size_t(g) * 4, 4);
  *a = fp16_to_f32(h[0]);
  *b = fp16_to_f32(h[1]);
}

// |x − ref| ≤ tol·Σ|terms|: the bound for sums whose reference may cancel to ~0.
::testing::AssertionResult close_sum(double x, double ref, double abs_sum, double tol) {
  if (std::fabs(x - ref) <= tol * abs_sum + 1e-30) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << x << ", want " << ref << " (|err| " << std::fabs(x - ref)
                                       << " > " << tol << "·" << abs_sum << ")";
}

TEST(QuantCodec, ParamsCheck) {
  EXPECT_NO_THROW(quant_params_check({2, 128, 128, 0.96f}));
  EXPECT_NO_THROW(quant_params_check({8, 32, 32, 0.0f}));
  EXPECT_NO_THROW(quant_params_check({4, 256, 64, 1.0f}));
  EXPECT_THROW(quant_params_check({3, 128, 128, 0.f}), Error);
  EXPECT_THROW(quant_params_check({2, 96, 32, 0.f}), Error);     // not a power of two
  EXPECT_THROW(quant_params_check({2, 128, 16, 0.f}), Error);    // group too small
  EXPECT_THROW(quant_params_check({2, 64, 128, 0.f}), Error);    // G > d
  EXPECT_THROW(quant_params_check({2, 128, 128, 1.5f}), Error);  // ratio outside [0, 1]
  EXPECT_THROW(quant_params_check({2, 128, 128, -0.1f}), Error);
  EXPECT_THROW(quant_params_check({2, 128, 128, NAN}), Error);
  try {
    quant_params_check({2, 128, 48, 0.f});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("48"), std::string::npos) << e.what();
  }
}

TEST(QuantCodec, BitsPerElement) {
  EXPECT_DOUBLE_EQ(bits_per_element({2, 128, 128, 0.f}), 2.25);
  EXPECT_DOUBLE_EQ(bits_per_element({2, 128, 32, 0.f}), 3.0);
  EXPECT_DOUBLE_EQ(bits_per_element({4, 256, 64, 0.f}), 4.5);
  EXPECT_DOUBLE_EQ(bits_per_element({8, 256, 256, 0.f}), 8.125);
  EXPECT_EQ(quant_row_bytes({2, 128, 128, 0.f}), 36u);
  EXPECT_EQ(quant_row_bytes({2, 256, 128, 0.f}), 72u);
  EXPECT_EQ(quant_row_bytes({4, 64, 32, 0.f}), 40u);
  for (auto s : all_shapes())
    for (int bits : {2, 4, 8}) {
      const QuantParams p{bits, s.d, s.G, 0.f};
      EXPECT_DOUBLE_EQ(8.0 * double(quant_row_bytes(p)) / s.d, bits_per_element(p));
    }
  EXPECT_DOUBLE_EQ(kivi_key_bits_per_element({2, 128, 32}), 3.0);
  EXPECT_DOUBLE_EQ(kivi_bits_per_element({2, 128, 32}, 32), 3.0);
  EXPECT_DOUBLE_EQ(kivi_bits_per_element({2, 128, 128}, 128), 2.25);
  EXPECT_EQ(kivi_key_block_bytes({2, 128, 32}), 32u * 32u + 512u);
}

TEST(QuantCodec, ClipThresholdDefinition) {
  const float x[8] = {-5.0f, 1.0f, 2.0f, -3.0f, 4.0f, 0.5f, -7.0f, 6.0f};  // |x| sorted: .5 1 2 3 4 5 6 7
  EXPECT_EQ(clip_threshold(x, 8, 0.5f), 4.0f);    // index 4
  EXPECT_EQ(clip_threshold(x, 8, 0.96f), 7.0f);   // ⌊7.68⌋ = 7
  EXPECT_EQ(clip_threshold(x, 8, 0.874f), 6.0f);  // ⌊6.992⌋ = 6
  EXPECT_EQ(clip_threshold(x, 8, 0.1f), 0.5f);    // ⌊0.8⌋ = 0
  EXPECT_EQ(clip_threshold(x, 8, 0.0f), INFINITY);
  EXPECT_EQ(clip_threshold(x, 8, 1.0f), INFINITY);
  for (int d : {32, 128, 256})
    for (float r : {0.92f, 0.96f, 0.5f, 0.999f}) {
      const auto v = test::random_vector(static_cast<size_t>(d), uint64_t(d) * 31 + uint64_t(r * 1000));
      EXPECT_EQ(clip_threshold(v.data(), d, r), ref_tau(v, r)) << d << " " << r;
    }
}

// Hand-computed bytes: d = 64, G = 32, INT2. Group 0 holds codes (s + j) % 4 at dim j + 8s
// (values = codes, scale 1, zero 0); group 1 the same values + 10 (zero −10).
TEST(QuantCodec, Int2PackingHandExample) {
  const QuantParams p{2, 64, 32, 0.f};
  std::vector<float> x(64);
  for (int j = 0; j < 8; ++j)
    for (int s = 0; s < 4; ++s) {
      x[j + 8 * s] = float((s + j) % 4);
      x[32 + j + 8 * s] = float((s + j) % 4) + 10.0f;
    }
  std::vector<uint8_t> row(quant_row_bytes(p));
  ASSERT_EQ(row.size(), 16u + 8u);
  quantize_row_ref(p, x.data(), row.data());
  const uint8_t want[24] = {0xE4, 0x39, 0x4E, 0x93, 0xE4, 0x39, 0x4E, 0x93,   // group 0 codes
                            0xE4, 0x39, 0x4E, 0x93, 0xE4, 0x39, 0x4E, 0x93,   // group 1 codes
                            0x00, 0x3C, 0x00, 0x00,                           // fp16 1.0, +0.0
                            0x00, 0x3C, 0x00, 0xC9};                          // fp16 1.0, −10.0
  for (int i = 0; i < 24; ++i) EXPECT_EQ(row[i], want[i]) << "byte " << i;
  std::vector<float> y(64);
  dequantize_row_ref(p, row.data(), y.data());
  EXPECT_TRUE(test::all_close(y, x, 0.0, 0.0));
}

// INT4, G = 32: byte j holds dim j (low nibble) and dim j + 16 (high nibble).
TEST(QuantCodec, Int4PackingHandExample) {
  const QuantParams p{4, 32, 32, 0.f};
  std::vector<float> x(32);
  for (int j = 0; j < 16; ++j) {
    x[j] = float(j);
    x[16 + j] = float(15 - j);
  }
  std::vector<uint8_t> row(quant_row_bytes(p));
  quantize_row_ref(p, x.data(), row.data());
  for (int j = 0; j < 16; ++j) EXPECT_EQ(row[j], uint8_t(j | (15 - j) << 4)) << "byte " << j;
  EXPECT_EQ(row[16], 0x00);  // scale 15/15 = 1.0 = 0x3C00
  EXPECT_EQ(row[17], 0x3C);
  EXPECT_EQ(row[18], 0x00);
  EXPECT_EQ(row[19], 0x00);
}

TEST(QuantCodec, PackUnpackRoundTrip) {
  std::mt19937 rng(5);
  for (int bits : {2, 4, 8})
    for (int n : {32, 64, 128, 256}) {
      std::vector<uint8_t> c(static_cast<size_t>(n)), packed(static_cast<size_t>(n * bits / 8)),
          back(static_cast<size_t>(n));
      for (auto& v : c) v = uint8_t(rng() % (1u << bits));
      pack_codes(bits, n, c.data(), packed.data());
      unpack_codes(bits, n, packed.data(), back.data());
      EXPECT_EQ(c, back) << bits << " " << n;
      if (bits == 8) {
        EXPECT_EQ(c, packed);
      }
    }
}

// Budget 1: every element's round-trip error, per code, against the stored (fp16) grid.
TEST(QuantCodec, RoundTripErrorPerCode) {
  int rows = 0;
  for (int bits : {2, 4, 8})
    for (auto sh : all_shapes())
      for (float ratio : kRatios)
        for (int kind = 0; kind < 4; ++kind)
          for (uint64_t seed = 0; seed < 6; ++seed) {
            const QuantParams p{bits, sh.d, sh.G, ratio};
            const int L = quant_levels(bits);
            const auto x = make_row(kind, sh.d, seed * 1000 + uint64_t(kind * 100 + bits + sh.d + sh.G));
            std::vector<uint8_t> row(quant_row_bytes(p));
            std::vector<float> y(static_cast<size_t>(sh.d));
            quantize_row(p, x.data(), row.data());
            dequantize_row_ref(p, row.data(), y.data());
            ++rows;
            const float tau = ref_tau(x, ratio);
            std::vector<uint8_t> codes(static_cast<size_t>(sh.G));
            for (int g = 0; g < sh.d / sh.G; ++g) {
              float s, z;
              read_pair(p, row.data(), g, &s, &z);
              double lo = INFINITY, hi = -INFINITY;
              for (int i = 0; i < sh.G; ++i) {
                const double xc = std::clamp(x[g * sh.G + i], -tau, tau);
                lo = std::min(lo, xc);
                hi = std::max(hi, xc);
              }
              // The scale is what the formula asks (fp16-rounded), not merely "some" scale.
              const double mag = std::max(std::fabs(lo), std::fabs(hi));
              const double want_s = std::max(std::max(hi - lo, mag / 256.0) / L, 0x1p-24);
              // Rounded up to fp16: within one fp16 ulp above.
              ASSERT_GE(s, want_s * (1.0 - 1e-7)) << "bits " << bits << " group " << g;
              ASSERT_LE(s, want_s * (1.0 + 0x1p-10) + 0x1p-24) << "bits " << bits << " group " << g;
              // The grid spans [lo, hi] up to fp16 rounding of scale and zero.
              const double grid_lo = -double(z) * s, grid_hi = (L - double(z)) * s;
              const double slack = 0x1p-9 * mag + 0x1p-23;
              ASSERT_LE(std::fabs(grid_lo - lo), slack) << "bits " << bits;
              ASSERT_GE(grid_hi, hi - slack) << "bits " << bits;
              unpack_codes(bits, sh.G, row.data() + size_t(g) * sh.G * bits / 8, codes.data());
              for (int i = 0; i < sh.G; ++i) {
                const int k = g * sh.G + i;
                ASSERT_TRUE(std::isfinite(y[k]));
                const double xc = std::clamp(x[k], -tau, tau);
                const double outside = std::max({0.0, grid_lo - xc, xc - grid_hi});
                const double err_c = std::fabs(xc - y[k]);
                ASSERT_LE(err_c, s / 2.0 + outside + 1e-6 * (std::fabs(xc) + s))
                    << "bits " << bits << " d " << sh.d << " G " << sh.G << " ratio " << ratio << " kind " << kind
                    << " dim " << k << " x " << x[k] << " code " << int(codes[i]) << " scale " << s << " zero " << z;
                // Clipped values: bounded by their clip distance plus the code error.
                ASSERT_LE(std::fabs(x[k] - y[k]), std::fabs(x[k] - xc) + err_c + 1e-6 * (std::fabs(x[k]) + s));
                // Codes are the nearest point of the stored grid (fp16 scale and zero).
                for (int nb : {int(codes[i]) - 1, int(codes[i]) + 1})
                  if (nb >= 0 && nb <= L) {
                    ASSERT_LE(err_c, std::fabs(xc - (nb - double(z)) * s) + 1e-6 * (std::fabs(xc) + s));
                  }
              }
            }
          }
  EXPECT_EQ(rows, 3 * 10 * 4 * 4 * 6);
}

// Clipping really clips: the outlier of kind 1 lands on ±τ (up to the code error).
TEST(QuantCodec, ClippingBoundsOutliers) {
  const QuantParams p{2, 128, 128, 0.96f};
  auto x = make_row(1, 128, 3);
  const float tau = ref_tau(x, 0.96f);
  ASSERT_LT(tau, 10.0f);
  std::vector<uint8_t> row(quant_row_bytes(p));
  std::vector<float> y(128);
  quantize_row(p, x.data(), row.data());
  dequantize_row(p, row.data(), y.data());
  for (float v : y) EXPECT_LE(std::fabs(v), tau * 1.01f);
}

TEST(QuantCodec, ConstantZeroAndExtremeRows) {
  for (int bits : {2, 4, 8})
    for (int G : {32, 128}) {
      const QuantParams p{bits, 128, G, 0.f};
      std::vector<uint8_t> row(quant_row_bytes(p));
      std::vector<float> y(128);
      for (float c : {0.0f, 1.0f, -3.5f, 1e-7f, 1000.0f, -60000.0f}) {
        std::vector<float> x(128, c);
        quantize_row(p, x.data(), row.data());
        dequantize_row(p, row.data(), y.data());
        for (float v : y) {
          ASSERT_TRUE(std::isfinite(v)) << c;
          ASSERT_LE(std::fabs(v - c), std::fabs(c) * 0x1p-9 + 0x1p-24) << "bits " << bits << " c " << c;
        }
        if (c == 0.0f) {
          EXPECT_TRUE(test::all_close(y, x, 0.0, 0.0));
        }
      }
      // Outliers far beyond fp16 range saturate but stay finite.
      auto x = make_row(1, 128, 9);
      x[5] = 1e7f;
      x[6] = -2e6f;
      quantize_row(p, x.data(), row.data());
      dequantize_row(p, row.data(), y.data());
      for (float v : y) ASSERT_TRUE(std::isfinite(v));
      // NaN inputs do not poison the codes of the other groups (code 0, no UB).
      x = make_row(0, 128, 10);
      x[0] = NAN;
      quantize_row(p, x.data(), row.data());
      dequantize_row(p, row.data(), y.data());
      for (int i = G; i < 128; ++i) ASSERT_TRUE(std::isfinite(y[i]));
    }
}

// Budget 2: AVX2 vs reference on every shape: dequant bit-exact, dot/axpy within 1e-5.
TEST(QuantCodec, FastMatchesReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  for (int bits : {2, 4, 8})
    for (auto sh : all_shapes())
      for (int kind = 0; kind < 4; ++kind) {
        const QuantParams p{bits, sh.d, sh.G, kind == 1 ? 0.96f : 0.0f};
        const int n = 13;
        const size_t rb = quant_row_bytes(p), stride = rb + 3;  // odd stride: unaligned rows
        std::vector<uint8_t> rows(stride * n);
        std::vector<float> xs(static_cast<size_t>(sh.d) * n);
        for (int r = 0; r < n; ++r) {
          const auto x = make_row(kind, sh.d, uint64_t(r * 17 + kind + bits));
          quantize_row(p, x.data(), rows.data() + r * stride);
          dequantize_row_ref(p, rows.data() + r * stride, xs.data() + size_t(r) * sh.d);
        }
        const auto q = test::random_vector(static_cast<size_t>(sh.d), 77 + uint64_t(sh.d), -2.0f, 2.0f);
        const auto a = test::random_vector(n, 78, -1.0f, 1.0f);
        std::vector<float> out_ref(n), out_fast(n);
        dot_rows_ref(p, q.data(), rows.data(), stride, n, out_ref.data());
        dot_rows_avx2(p, q.data(), rows.data(), stride, n, out_fast.data());
        for (int r = 0; r < n; ++r) {
          const uint8_t* row = rows.data() + r * stride;
          const float* x = xs.data() + size_t(r) * sh.d;
          std::vector<float> y(static_cast<size_t>(sh.d));
          dequantize_row_avx2(p, row, y.data());
          ASSERT_EQ(std::memcmp(y.data(), x, sizeof(float) * sh.d), 0) << "dequant bits " << bits;
          double abs_sum = 0.0;
          for (int i = 0; i < sh.d; ++i) abs_sum += std::fabs(double(q[i]) * x[i]);
          ASSERT_TRUE(close_sum(dot_row_avx2(p, q.data(), row), dot_row_ref(p, q.data(), row), abs_sum, 1e-5))
              << "dot bits " << bits << " d " << sh.d << " G " << sh.G << " kind " << kind;
          ASSERT_TRUE(close_sum(out_fast[r], out_ref[r], abs_sum, 1e-5)) << "dot_rows";
          ASSERT_EQ(out_ref[r], dot_row_ref(p, q.data(), row));
          // axpy of one row onto a nonzero accumulator.
          auto acc_ref = test::random_vector(static_cast<size_t>(sh.d), 5);
          auto acc_fast = acc_ref;
          axpy_row_ref(p, a[r], row, acc_ref.data());
          axpy_row_avx2(p, a[r], row, acc_fast.data());
          for (int i = 0; i < sh.d; ++i)
            ASSERT_TRUE(close_sum(acc_fast[i], acc_ref[i], std::fabs(acc_ref[i]) + std::fabs(a[r] * x[i]) + 1e-6, 1e-5))
                << "axpy dim " << i;
        }
        auto acc_ref = test::random_vector(static_cast<size_t>(sh.d), 6);
        auto acc_fast = acc_ref;
        std::vector<double> abs_acc(static_cast<size_t>(sh.d));
        for (int i = 0; i < sh.d; ++i) {
          abs_acc[i] = std::fabs(acc_ref[i]);
          for (int r = 0; r < n; ++r) abs_acc[i] += std::fabs(a[r] * xs[size_t(r) * sh.d + i]);
        }
        axpy_rows_ref(p, a.data(), rows.data(), stride, n, acc_ref.data());
        axpy_rows_avx2(p, a.data(), rows.data(), stride, n, acc_fast.data());
        for (int i = 0; i < sh.d; ++i) ASSERT_TRUE(close_sum(acc_fast[i], acc_ref[i], abs_acc[i], 1e-5)) << "axpy_rows";
        // The codes-only dot on one group.
        ASSERT_TRUE(close_sum(dot_codes_avx2(bits, sh.G, q.data(), rows.data()),
                              dot_codes_ref(bits, sh.G, q.data(), rows.data()), 1e-6 + 255.0 * sh.G * 2.0, 1e-6));
      }
}

// Groups whose packed part is under 8 bytes (INT2 G = 16, INT4 G = 8) are below what the
// AVX2 kernels read at once: the dispatched entry points must still match the reference
// (they once read past the group into the next row's scales).
TEST(QuantCodec, DispatchMatchesReferenceOnSmallGroups) {
  for (auto [bits, G] : {std::pair{2, 16}, std::pair{2, 8}, std::pair{4, 8}, std::pair{2, 32}, std::pair{4, 16}}) {
    const int d = 64, n = 5;
    const QuantParams p{bits, d, G, 0.0f};
    const size_t rb = quant_row_bytes(p);
    std::vector<uint8_t> rows(rb * n);
    for (int r = 0; r < n; ++r) {
      const auto x = test::random_vector(size_t(d), 300 + uint64_t(r), -3.0f, 3.0f);
      quantize_row(p, x.data(), rows.data() + size_t(r) * rb);
    }
    const auto q = test::random_vector(size_t(d), 400, -2.0f, 2.0f);
    std::vector<float> out(n), ref(n);
    dot_rows(p, q.data(), rows.data(), rb, n, out.data());
    dot_rows_ref(p, q.data(), rows.data(), rb, n, ref.data());
    for (int r = 0; r < n; ++r) {
      const uint8_t* row = rows.data() + size_t(r) * rb;
      EXPECT_NEAR(out[size_t(r)], ref[size_t(r)], 1e-4 * (1 + std::fabs(ref[size_t(r)]))) << bits << " bits, G " << G;
      EXPECT_NEAR(dot_row(p, q.data(), row), ref[size_t(r)], 1e-4 * (1 + std::fabs(ref[size_t(r)]))) << bits << " bits, G " << G;
      std::vector<float> x(static_cast<size_t>(d)), xr(static_cast<size_t>(d)), acc(static_cast<size_t>(d), 0.5f),
          accr(static_cast<size_t>(d), 0.5f);
      dequantize_row(p, row, x.data());
      dequantize_row_ref(p, row, xr.data());
      axpy_row(p, 0.7f, row, acc.data());
      axpy_row_ref(p, 0.7f, row, accr.data());
      for (int i = 0; i < d; ++i) {
        ASSERT_EQ(x[size_t(i)], xr[size_t(i)]) << bits << " bits, G " << G;
        ASSERT_NEAR(acc[size_t(i)], accr[size_t(i)], 1e-5) << bits << " bits, G " << G;
      }
    }
  }
}

// Budget 3: quantized dot vs fp32 dot. Deterministic: |q·x̂ − q·x| ≤ Σ_g (s_g/2 + slack)·Σ|q_g|
// for unclipped rows. Statistical: relative RMS error shrinks ≈ 4× per 2 extra bits.
TEST(QuantCodec, QuantizedDotVsF32) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const int d = 128, n_rows = 400;
  double rel_rms[3];
  for (int b = 0; b < 3; ++b) {
    const int bits = 2 << b;
    const QuantParams p{bits, d, 32, 0.f};
    double se = 0.0, sref = 0.0;
    std::vector<uint8_t> row(quant_row_bytes(p));
    std::vector<float> x(d), q(d);
    for (int r = 0; r < n_rows; ++r) {
      for (int i = 0; i < d; ++i) {
        x[i] = n01(rng);
        q[i] = n01(rng);
      }
      quantize_row(p, x.data(), row.data());
      double exact = 0.0, bound = 0.0;
      for (int i = 0; i < d; ++i) exact += double(q[i]) * x[i];
      for (int g = 0; g < d / 32; ++g) {
        float s, z;
        read_pair(p, row.data(), g, &s, &z);
        double qa = 0.0, mag = 0.0;
        for (int i = 0; i < 32; ++i) {
          qa += std::fabs(q[g * 32 + i]);
          mag = std::max(mag, double(std::fabs(x[g * 32 + i])));
        }
        bound += (s / 2.0 + 0x1p-9 * mag + 1e-6) * qa;
      }
      const double got = dot_row(p, q.data(), row.data());
      ASSERT_LE(std::fabs(got - exact), bound) << "bits " << bits << " row " << r;
      se += (got - exact) * (got - exact);
      sref += exact * exact;
    }
    rel_rms[b] = std::sqrt(se / sref);
  }
  // Uniform error of a step s has variance s²/12; for N(0,1) groups of 32 the range is ≈ 4.1σ.
  EXPECT_LT(rel_rms[0], 0.5) << "INT2";
  EXPECT_GT(rel_rms[0], 0.2) << "INT2";
  EXPECT_LT(rel_rms[1], rel_rms[0] / 3.0) << "INT4";
  EXPECT_LT(rel_rms[2], rel_rms[1] / 10.0) << "INT8";
}

// ---- Lloyd-Max ---------------------------------------------------------------------------

// Codes against an independent computation of z in double; levels from the stored pair.
TEST(LloydMax, ApproxCodesAndLevels) {
  for (auto sh : all_shapes())
    for (float ratio : kRatios)
      for (int kind : {0, 1, 2}) {
        const QuantParams p{2, sh.d, sh.G, ratio};
        const auto x = make_row(kind, sh.d, uint64_t(sh.d + sh.G + kind));
        std::vector<uint8_t> row(quant_row_bytes(p)), codes(static_cast<size_t>(sh.G));
        quantize_row_lloyd_max_approx(p, x.data(), row.data());
        std::vector<float> y(static_cast<size_t>(sh.d));
        dequantize_row(p, row.data(), y.data());  // the uniform decoder reads it
        const float tau = ref_tau(x, ratio);
        for (int g = 0; g < sh.d / sh.G; ++g) {
          double mu = 0.0, var = 0.0;
          for (int i = 0; i < sh.G; ++i) mu += std::clamp(x[g * sh.G + i], -tau, tau);
          mu /= sh.G;
          for (int i = 0; i < sh.G; ++i) var += std::pow(std::clamp(x[g * sh.G + i], -tau, tau) - mu, 2);
          const double sigma = std::sqrt(var / sh.G), a = 1.50956 * 1.16 * sigma;
          unpack_codes(2, sh.G, row.data() + size_t(g) * sh.G / 4, codes.data());
          for (int i = 0; i < sh.G; ++i) {
            const double zz = (std::clamp(x[g * sh.G + i], -tau, tau) - mu) / sigma;
            const int want = int(zz > -0.98107) + int(zz > 0.0) + int(zz > 0.98107);
            if (std::fabs(std::fabs(zz) - 0.98107) > 1e-4 && std::fabs(zz) > 1e-4) {
              ASSERT_EQ(int(codes[i]), want) << "z " << zz;
            }
            // Dequantized level: μ + a·{−1, −1/3, 1/3, 1}[code], up to fp16 rounding.
            const double level = mu + a * (-1.0 + 2.0 * codes[i] / 3.0);
            ASSERT_NEAR(y[g * sh.G + i], level, 0x1p-9 * (std::fabs(mu) + a) + 1e-6) << "code " << int(codes[i]);
          }
        }
      }
}

TEST(LloydMax, ApproxHandExample) {
  // Values ±0.5, ±2 (8 each): μ = 0, σ = √2.125; z = ±0.343, ±1.372 → codes 1, 2, 0, 3.
  const QuantParams p{2, 32, 32, 0.f};
  std::vector<float> x(32);
  const float v[4] = {-2.0f, -0.5f, 0.5f, 2.0f};
  for (int i = 0; i < 32; ++i) x[i] = v[i % 4];
  std::vector<uint8_t> row(quant_row_bytes(p));
  quantize_row_lloyd_max_approx(p, x.data(), row.data());
  std::vector<uint8_t> codes(32);
  unpack_codes(2, 32, row.data(), codes.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(codes[i], i % 4);
  std::vector<float> y(32);
  dequantize_row(p, row.data(), y.data());
  const double a = 1.50956 * 1.16 * std::sqrt(2.125);
  const double lev[4] = {-a, -a / 3, a / 3, a};
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(y[i], lev[i % 4], 2e-3 * a);
}

TEST(LloydMax, ExactLevelsAndNearestCode) {
  for (auto sh : all_shapes())
    for (float ratio : kRatios)
      for (int kind = 0; kind < 4; ++kind) {
        const QuantParams p{2, sh.d, sh.G, ratio};
        const auto x = make_row(kind, sh.d, uint64_t(3 * sh.d + sh.G + kind));
        std::vector<uint8_t> row(quant_row_bytes(p)), codes(static_cast<size_t>(sh.G));
        quantize_row_lloyd_max_exact(p, x.data(), row.data());
        std::vector<float> y(static_cast<size_t>(sh.d));
        dequantize_row_lloyd_max_exact_ref(p, row.data(), y.data());
        const float tau = ref_tau(x, ratio);
        for (int g = 0; g < sh.d / sh.G; ++g) {
          float mu_h, sigma_h;
          read_pair(p, row.data(), g, &mu_h, &sigma_h);
          double mu = 0.0, var = 0.0;
          for (int i = 0; i < sh.G; ++i) mu += std::clamp(x[g * sh.G + i], -tau, tau);
          mu /= sh.G;
          for (int i = 0; i < sh.G; ++i) var += std::pow(std::clamp(x[g * sh.G + i], -tau, tau) - mu, 2);
          const double sigma = std::sqrt(var / sh.G);
          ASSERT_NEAR(mu_h, mu, 0x1p-11 * std::fabs(mu) + 0x1p-24);
          ASSERT_NEAR(sigma_h, sigma, 0x1p-11 * sigma + 0x1p-24);
          const double c[4] = {-1.5104, -0.4528, 0.4528, 1.5104};
          for (int i = 0; i < sh.G; ++i) {
            const double xc = std::clamp(x[g * sh.G + i], -tau, tau);
            const double got = y[g * sh.G + i];
            double best = INFINITY;
            bool is_level = false;
            for (double ck : c) {
              const double lk = double(mu_h) + double(sigma_h) * ck;
              best = std::min(best, std::fabs(xc - lk));
              is_level |= std::fabs(got - lk) <= 1e-6 * (std::fabs(mu_h) + 2.0 * sigma_h) + 1e-12;
            }
            ASSERT_TRUE(is_level) << got;
            ASSERT_LE(std::fabs(xc - got), best + 1e-6 * (std::fabs(xc) + sigma_h)) << "not the nearest level";
          }
        }
      }
}

// On Gaussian data the exact Lloyd-Max quantizer reaches its textbook MSE (≈ 0.1175 σ²),
// better than min-max uniform INT2 and the reference approximation.
TEST(LloydMax, GaussianMse) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const QuantParams p{2, 256, 256, 0.f};
  double mse_exact = 0.0, mse_approx = 0.0, mse_uniform = 0.0, n = 0.0;
  std::vector<float> x(256), y(256);
  std::vector<uint8_t> row(quant_row_bytes(p));
  for (int r = 0; r < 200; ++r) {
    for (float& v : x) v = 0.3f + 2.0f * n01(rng);
    quantize_row_lloyd_max_exact(p, x.data(), row.data());
    dequantize_row_lloyd_max_exact(p, row.data(), y.data());
    for (int i = 0; i < 256; ++i) mse_exact += std::pow(x[i] - y[i], 2);
    quantize_row_lloyd_max_approx(p, x.data(), row.data());
    dequantize_row(p, row.data(), y.data());
    for (int i = 0; i < 256; ++i) mse_approx += std::pow(x[i] - y[i], 2);
    quantize_row(p, x.data(), row.data());
    dequantize_row(p, row.data(), y.data());
    for (int i = 0; i < 256; ++i) mse_uniform += std::pow(x[i] - y[i], 2);
    n += 256 * 4.0;  // σ² = 4
  }
  mse_exact /= n;
  mse_approx /= n;
  mse_uniform /= n;
  EXPECT_NEAR(mse_exact, 0.1175, 0.008);
  EXPECT_LT(mse_exact, mse_approx);
  EXPECT_LT(mse_approx, mse_uniform);
  std::printf("Gaussian MSE/σ²: lloyd-max exact %.4f, approx %.4f, uniform min-max %.4f\n", mse_exact, mse_approx,
              mse_uniform);
}

TEST(LloydMax, ExactFastMatchesReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  for (auto sh : all_shapes())
    for (int kind = 0; kind < 4; ++kind) {
      const QuantParams p{2, sh.d, sh.G, 0.92f};
      const auto x = make_row(kind, sh.d, uint64_t(sh.d * sh.G + kind));
      const auto q = test::random_vector(static_cast<size_t>(sh.d), 9, -2.0f, 2.0f);
      std::vector<uint8_t> row(quant_row_bytes(p));
      quantize_row_lloyd_max_exact(p, x.data(), row.data());
      std::vector<float> y_ref(static_cast<size_t>(sh.d)), y_fast(static_cast<size_t>(sh.d));
      dequantize_row_lloyd_max_exact_ref(p, row.data(), y_ref.data());
      dequantize_row_lloyd_max_exact_avx2(p, row.data(), y_fast.data());
      ASSERT_EQ(std::memcmp(y_ref.data(), y_fast.data(), sizeof(float) * sh.d), 0);
      double abs_sum = 0.0;
      for (int i = 0; i < sh.d; ++i) abs_sum += std::fabs(double(q[i]) * y_ref[i]);
      ASSERT_TRUE(close_sum(dot_row_lloyd_max_exact_avx2(p, q.data(), row.data()),
                            dot_row_lloyd_max_exact_ref(p, q.data(), row.data()), abs_sum, 1e-5));
      auto acc_ref = test::random_vector(static_cast<size_t>(sh.d), 4);
      auto acc_fast = acc_ref;
      axpy_row_lloyd_max_exact_ref(p, -0.7f, row.data(), acc_ref.data());
      axpy_row_lloyd_max_exact_avx2(p, -0.7f, row.data(), acc_fast.data());
      ASSERT_TRUE(test::all_close(acc_fast, acc_ref, 0.0, 0.0));  // same operations: bit-exact
    }
}

TEST(LloydMax, RefusesOtherWidths) {
  std::vector<float> x(128, 1.0f);
  std::vector<uint8_t> row(quant_row_bytes({4, 128, 128, 0.f}));
  EXPECT_THROW(quantize_row_lloyd_max_exact({4, 128, 128, 0.f}, x.data(), row.data()), Error);
  EXPECT_THROW(quantize_row_lloyd_max_approx({8, 128, 128, 0.f}, x.data(), row.data()), Error);
}

// ---- KIVI --------------------------------------------------------------------------------

// Channels of very different magnitudes: per-channel scales follow each channel's own range
// over the T tokens, and every element is within half its channel's step.
TEST(Kivi, KeysPerChannel) {
  for (int bits : {2, 4, 8})
    for (int d : {32, 128})
      for (int T : {1, 8, 32}) {
        const KiviKeyParams p{bits, d, T};
        const int L = quant_levels(bits);
        std::mt19937_64 rng(uint64_t(bits * 1000 + d + T));
        std::normal_distribution<float> n01(0.0f, 1.0f);
        std::vector<float> k(static_cast<size_t>(T) * d), y(static_cast<size_t>(T) * d);
        for (int t = 0; t < T; ++t)
          for (int c = 0; c < d; ++c) k[size_t(t) * d + c] = std::pow(10.0f, float(c % 5 - 2)) * n01(rng) + float(c % 3);
        std::vector<uint8_t> block(kivi_key_block_bytes(p));
        kivi_quantize_key_block(p, k.data(), block.data());
        kivi_dequantize_key_block(p, block.data(), y.data());
        const uint8_t* params = block.data() + size_t(T) * d * bits / 8;
        for (int c = 0; c < d; ++c) {
          fp16 h[2];
          std::memcpy(h, params + 4 * c, 4);
          const double s = fp16_to_f32(h[0]), z = fp16_to_f32(h[1]);
          double lo = INFINITY, hi = -INFINITY;
          for (int t = 0; t < T; ++t) {
            lo = std::min(lo, double(k[size_t(t) * d + c]));
            hi = std::max(hi, double(k[size_t(t) * d + c]));
          }
          const double mag = std::max(std::fabs(lo), std::fabs(hi));
          const double want_s = std::max(std::max(hi - lo, mag / 256.0) / L, 0x1p-24);
          ASSERT_GE(s, want_s * (1.0 - 1e-7)) << "channel " << c;
          ASSERT_LE(s, want_s * (1.0 + 0x1p-10) + 0x1p-24) << "channel " << c;
          const double grid_lo = -z * s, grid_hi = (L - z) * s;
          for (int t = 0; t < T; ++t) {
            const double xv = k[size_t(t) * d + c];
            const double outside = std::max({0.0, grid_lo - xv, xv - grid_hi});
            ASSERT_LE(std::fabs(xv - y[size_t(t) * d + c]), s / 2 + outside + 1e-6 * (std::fabs(xv) + s))
                << "bits " << bits << " T " << T << " channel " << c << " token " << t;
          }
        }
        // Scores: fast (scales folded into q) vs dequantize-then-dot.
        const auto q = test::random_vector(static_cast<size_t>(d), 21, -1.0f, 1.0f);
        std::vector<float> s_ref(static_cast<size_t>(T)), s_fast(static_cast<size_t>(T));
        kivi_dot_key_block_ref(p, q.data(), block.data(), s_ref.data());
        kivi_dot_key_block(p, q.data(), block.data(), s_fast.data());
        for (int t = 0; t < T; ++t) {
          double abs_sum = 0.0;
          for (int c = 0; c < d; ++c) abs_sum += std::fabs(double(q[c]) * y[size_t(t) * d + c]);
          ASSERT_TRUE(close_sum(s_fast[t], s_ref[t], abs_sum, 1e-5)) << "token " << t;
        }
      }
}

// Layout: a block of 2 tokens, d = 32, INT2; channel c holds (t=0: 0, t=1: 3) for c even,
// (t=0: 3, t=1: 0) for c odd → scale 1, zero 0; token rows use the quarter packing.
TEST(Kivi, KeyBlockLayoutHandExample) {
  const KiviKeyParams p{2, 32, 2};
  std::vector<float> k(64);
  for (int c = 0; c < 32; ++c) {
    k[c] = (c % 2 == 0) ? 0.0f : 3.0f;
    k[32 + c] = (c % 2 == 0) ? 3.0f : 0.0f;
  }
  std::vector<uint8_t> block(kivi_key_block_bytes(p));
  ASSERT_EQ(block.size(), 16u + 128u);
  kivi_quantize_key_block(p, k.data(), block.data());
  // Byte j of token 0 holds channels j, j+8, j+16, j+24: all even or all odd with j.
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(block[j], j % 2 == 0 ? 0x00 : 0xFF) << j;
    EXPECT_EQ(block[8 + j], j % 2 == 0 ? 0xFF : 0x00) << j;
  }
  for (int c = 0; c < 32; ++c) {
    EXPECT_EQ(block[16 + 4 * c], 0x00);
    EXPECT_EQ(block[16 + 4 * c + 1], 0x3C);  // fp16 1.0
    EXPECT_EQ(block[16 + 4 * c + 2], 0x00);
    EXPECT_EQ(block[16 + 4 * c + 3], 0x00);  // +0.0
  }
  EXPECT_THROW(kivi_key_params_check({3, 32, 2}), Error);
  EXPECT_THROW(kivi_key_params_check({2, 48, 2}), Error);
  EXPECT_THROW(kivi_key_params_check({2, 32, 0}), Error);
}

// Speed of the INT2 history kernels (not run by default):
//   test_kv --gtest_also_run_disabled_tests --gtest_filter='*Int2Speed*'
TEST(QuantCodec, DISABLED_Int2Speed) {
  const QuantParams p{2, 128, 128, 0.f};
  const int n = 4096;
  const size_t rb = quant_row_bytes(p);
  std::vector<uint8_t> rows(rb * n);
  for (int r = 0; r < n; ++r) quantize_row(p, make_row(1, 128, uint64_t(r)).data(), rows.data() + r * rb);
  const auto q = test::random_vector(128, 1);
  const auto a = test::random_vector(n, 2);
  std::vector<float> out(n), acc(128, 0.0f);
  auto time_it = [&](auto&& f) {
    f();
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int it = 0; it < 10; ++it) f();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 10);
    }
    return best * 1e9 / n;  // ns per row
  };
  const double dot_ref = time_it([&] { dot_rows_ref(p, q.data(), rows.data(), rb, n, out.data()); });
  const double dot_fast = time_it([&] { dot_rows_avx2(p, q.data(), rows.data(), rb, n, out.data()); });
  const double dot1 = time_it([&] {
    for (int r = 0; r < n; ++r) out[r] = dot_row_avx2(p, q.data(), rows.data() + r * rb);
  });
  const double axpy_ref = time_it([&] { axpy_rows_ref(p, a.data(), rows.data(), rb, n, acc.data()); });
  const double axpy_fast = time_it([&] { axpy_rows_avx2(p, a.data(), rows.data(), rb, n, acc.data()); });
  const double axpy1 = time_it([&] {
    for (int r = 0; r < n; ++r) axpy_row_avx2(p, a[r], rows.data() + r * rb, acc.data());
  });
  std::printf("INT2 d=128 G=128, ns/row: dot ref %.1f, dot_rows avx2 %.1f (%.1fx), dot_row avx2 %.1f\n", dot_ref,
              dot_fast, dot_ref / dot_fast, dot1);
  std::printf("                          axpy ref %.1f, axpy_rows avx2 %.1f (%.1fx), axpy_row avx2 %.1f\n", axpy_ref,
              axpy_fast, axpy_ref / axpy_fast, axpy1);
  std::printf("dot_rows avx2: %.2f GB/s of packed rows\n", double(rb) / dot_fast);
}

}  // namespace
}  // namespace oscar
