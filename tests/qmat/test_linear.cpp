// WeightMatrix and the linear layers over it, for every supported format: linear() and
// linear_decode() against the double-precision linear_ref() within derived bounds, the
// decode path bit-exact against its kernels and against m = 1, both prefill designs
// (row kernels, dequantized panels into sgemm), bias, and view()'s refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../test_util.h"
#include "oscar/core/dtype.h"
#include "oscar/core/error.h"
#include "oscar/formats/ggml_type.h"
#include "oscar/ops/cpu_features.h"
#include "oscar/ops/matmul.h"
#include "oscar/qmat/fdot.h"
#include "oscar/qmat/linear_paths.h"
#include "oscar/qmat/qdot.h"
#include "oscar/qmat/weight_matrix.h"

namespace oscar::qmat {
namespace {

constexpr double u32 = 1.0 / (1 << 24);  // unit roundoff of f32

const GgmlType all_types[] = {GgmlType::f32,  GgmlType::f16,  GgmlType::bf16, GgmlType::q4_0,
                              GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1, GgmlType::q8_0,
                              GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k};

bool is_block(GgmlType t) { return qdot_act_format(t) != ActFormat::none; }

// Elements per activation scale: 32 for the legacy quants, 256 for the K-quants.
int64_t act_scale_block(GgmlType t) { return qdot_act_format(t) == ActFormat::q8_k ? act_k_block : act_block; }

void put_half(uint8_t* p, float v) {
  const uint16_t bits = f32_to_fp16(v).bits;
  std::memcpy(p, &bits, 2);
}

// A random matrix in format t with its f32 values, and for the block formats a bound on
// the magnitude of each 32-element sub-block's minimum term (what a kernel subtracts
// after multiplying the unsigned quants: Q4_1/Q5_1's m, Q4_K/Q5_K's dmin·(6-bit min) ≤ 63·dmin,
// Q6_K's 32·d·|sc| for the larger of the sub-block's two scales).
struct Matrix {
  GgmlType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;  // the view's storage (empty for F32)
  std::vector<float> values;   // [rows, cols] as f32
  std::vector<double> min_mag;  // [rows, cols / 32]
  WeightMatrix w;
};

Matrix random_matrix(GgmlType t, int64_t rows, int64_t cols, uint64_t seed) {
  Matrix mx{t, rows, cols, {}, {}, {}, {}};
  std::mt19937_64 rng(seed);
  mx.min_mag.assign(size_t(rows * (cols / 32 + 1)), 0.0);
  if (t == GgmlType::f32) {
    mx.values = test::random_vector(size_t(rows * cols), seed);
    mx.w = WeightMatrix::from_f32(mx.values, rows, cols);
    return mx;
  }
  if (t == GgmlType::f16 || t == GgmlType::bf16) {
    const auto v = test::random_vector(size_t(rows * cols), seed);
    mx.bytes.resize(size_t(2 * rows * cols));
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t b = t == GgmlType::f16 ? f32_to_fp16(v[i]).bits : f32_to_bf16(v[i]).bits;
      std::memcpy(&mx.bytes[2 * i], &b, 2);
    }
  } else {
    // Random bytes (every quant, scale and min pattern) with sane fp16 d / dmin fields,
    // as in test_qdot_legacy.cpp / test_qdot_kquant.cpp.
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> legacy_scale(-0.05f, 0.05f), k_scale(0.0f, 0.01f);
    mx.bytes.resize(size_t(ggml_row_bytes(t, cols) * uint64_t(rows)));
    for (uint8_t& c : mx.bytes) c = uint8_t(byte(rng));
    const int64_t be = ggml_block_elements(t), bb = ggml_block_bytes(t), nb = rows * cols / be;
    const int64_t subs = be / 32;  // 32-element sub-blocks per block
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* p = mx.bytes.data() + b * bb;
      double mmag = 0.0;
      switch (t) {
        case GgmlType::q4_1:
        case GgmlType::q5_1: {
          const float m = legacy_scale(rng);
          put_half(p, legacy_scale(rng));
          put_half(p + 2, m);
          mmag = std::abs(double(fp16_to_f32(f32_to_fp16(m))));
          break;
        }
        case GgmlType::q4_k:
        case GgmlType::q5_k: {
          const float dmin = k_scale(rng);
          put_half(p, k_scale(rng));
          put_half(p + 2, dmin);
          mmag = 63.0 * double(fp16_to_f32(f32_to_fp16(dmin)));
          break;
        }
        case GgmlType::q6_k: {
          const float d = k_scale(rng);
          put_half(p + 208, d);
          mmag = 32.0 * double(fp16_to_f32(f32_to_fp16(d)));  // times |sc| below
          break;
        }
        default: put_half(p, legacy_scale(rng));
      }
      for (int64_t s = 0; s < subs; ++s) {
        double sub_mag = mmag;
        if (t == GgmlType::q6_k) {
          const auto* sc = reinterpret_cast<const int8_t*>(p + 192 + 2 * s);
          sub_mag *= std::max(std::abs(int(sc[0])), std::abs(int(sc[1])));
        }
        mx.min_mag[size_t(b * subs + s)] = sub_mag;
      }
    }
  }
  mx.values.resize(size_t(rows * cols));
  const uint64_t rb = ggml_row_bytes(t, cols);
  for (int64_t r = 0; r < rows; ++r) dequantize_row(t, mx.bytes.data() + r * rb, mx.values.data() + r * cols, cols);
  mx.w = WeightMatrix::view(t, mx.bytes.data(), rows, cols, nullptr);
  return mx;
}

// Activations whose 32-blocks differ in scale by up to 10^3, so that mixing up the
// per-block activation scales shows.
std::vector<float> random_acts(int64_t m, int64_t k, uint64_t seed) {
  auto x = test::random_vector(size_t(m * k), seed);
  std::mt19937_64 rng(seed ^ 0x51ed27a3u);
  std::uniform_real_distribution<float> exp10(-2.0f, 1.0f);
  for (size_t b = 0; b * 32 < x.size(); ++b) {
    const float s = std::pow(10.0f, exp10(rng));
    for (size_t i = b * 32; i < std::min(x.size(), b * 32 + 32); ++i) x[i] *= s;
  }
  return x;
}

// The bound on |linear(·) − linear_ref(·)| for output (i, r):
//  - every format: the f32 evaluation of the k products in any order (each kernel's
//    chains, sgemm's blocking) errs by ≤ γ_k·S with S = Σ|w·x|, then one rounding for the
//    bias and one for linear_ref's own float(): (k + 3)·u·(S + |b|).
//  - block formats add the 8-bit activations, |x − d·q| ≤ d·(1/2 + 400u) with
//    d = max|x_block|/127 over the format's activation block (32, or 256 for the K-quants;
//    see test_qdot_legacy.cpp), i.e. Σ_blocks d·(1/2 + 400u)·Σ|w|, and the kernel's f32
//    formula, 2·(k/32 + 5)·u·Σ(|w| + min)·|x̂| (test_qdot_legacy's f32_tol; it covers the
//    K-quants' (2·k/256 + 6)·u·Σ(|w| + 2·min)·|x̂| of test_qdot_kquant.cpp for k ≥ 64).
std::vector<double> bounds(const Matrix& mx, const std::vector<float>& x, const float* bias, int64_t m) {
  const int64_t n = mx.rows, k = mx.cols, ab = act_scale_block(mx.type), kb = (k + ab - 1) / ab;
  std::vector<double> tol(size_t(m * n));
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x.data() + i * k;
    std::vector<double> d(size_t(kb), 0.0);
    for (int64_t p = 0; p < k; ++p) d[size_t(p / ab)] = std::max(d[size_t(p / ab)], std::abs(double(xi[p])) / 127.0);
    for (int64_t r = 0; r < n; ++r) {
      const float* wr = mx.values.data() + r * k;
      double s = 0.0, act = 0.0, mag = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double aw = std::abs(double(wr[p])), ax = std::abs(double(xi[p]));
        const double dq = d[size_t(p / ab)];
        s += aw * ax;
        act += dq * (0.5 + 400 * u32) * aw;
        mag += (aw + mx.min_mag[size_t(r * (k / 32) + p / 32)]) * (ax + dq);
      }
      const double b = bias ? std::abs(double(bias[r])) : 0.0;
      double t = double(k + 3) * u32 * (s + b);
      if (is_block(mx.type)) t += act + 2.0 * double(k / 32 + 5) * u32 * mag;
      tol[size_t(i * n + r)] = t * 1.01;
    }
  }
  return tol;
}

::testing::AssertionResult within(const std::vector<float>& got, const std::vector<float>& want,
                                  const std::vector<double>& tol) {
  for (size_t j = 0; j < got.size(); ++j) {
    const double err = std::abs(double(got[j]) - double(want[j]));
    if (!(err <= tol[j]))
      return ::testing::AssertionFailure() << "element " << j << ": got " << got[j] << ", want " << want[j]
                                           << " (error " << err << " > bound " << tol[j] << ")";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult bit_equal(const float* a, const float* b, size_t n) {
  for (size_t j = 0; j < n; ++j)
    if (std::memcmp(&a[j], &b[j], 4) != 0)
      return ::testing::AssertionFailure() << "element " << j << ": " << a[j] << " vs " << b[j];
  return ::testing::AssertionSuccess();
}

// The decode path's contract spelled out with its kernels: each x row quantized once (for
// the block formats, in the format's ActFormat), then one kernel call per (weight row,
// x row), then + bias.
template <class Act>
std::vector<float> decode_by_qdot(const Matrix& mx, const std::vector<float>& x, const float* bias, int64_t m,
                                  void (*quantize)(const float*, Act*, int64_t), QDotOf<Act> dot) {
  const int64_t n = mx.rows, k = mx.cols;
  std::vector<float> y(size_t(m * n));
  std::vector<Act> xq(size_t(k / act_block_elements<Act>));
  for (int64_t i = 0; i < m; ++i) {
    quantize(x.data() + i * k, xq.data(), k);
    for (int64_t r = 0; r < n; ++r) y[size_t(i * n + r)] = dot(mx.w.row(r), xq.data(), k) + (bias ? bias[r] : 0.0f);
  }
  return y;
}

std::vector<float> decode_by_kernels(const Matrix& mx, const std::vector<float>& x, const float* bias, int64_t m) {
  const int64_t n = mx.rows, k = mx.cols;
  const bool avx2 = use_avx2();
  switch (qdot_act_format(mx.type)) {
    case ActFormat::q8:
      return decode_by_qdot(mx, x, bias, m, avx2 ? quantize_act_avx2 : quantize_act_ref,
                            avx2 ? qdot_avx2_kernel(mx.type) : qdot_ref_kernel(mx.type));
    case ActFormat::q8_k:
      return decode_by_qdot(mx, x, bias, m, avx2 ? quantize_act_k_avx2 : quantize_act_k_ref,
                            avx2 ? qdot_k_avx2_kernel(mx.type) : qdot_k_ref_kernel(mx.type));
    case ActFormat::none: break;
  }
  std::vector<float> y(size_t(m * n));
  const FDotFn dot = avx2 ? fdot_avx2_kernel(mx.type) : fdot_ref_kernel(mx.type);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < n; ++r)
      y[size_t(i * n + r)] = dot(mx.w.row(r), x.data() + i * k, k) + (bias ? bias[r] : 0.0f);
  return y;
}

std::vector<int64_t> col_sizes(GgmlType t) {
  if (is_block(t)) return {ggml_block_elements(t), 3 * ggml_block_elements(t)};  // one block; several
  return {1, 13, 77, 300};  // F32 / F16 / BF16: k % 8 and k % 32 tails
}

TEST(Linear, AllFormatsAgainstReference) {
  uint64_t seed = 1;
  int combo = 0;
  for (GgmlType t : all_types) {
    for (int64_t cols : col_sizes(t)) {
      for (int64_t rows : {1, 3, 37, 129}) {
        const Matrix mx = random_matrix(t, rows, cols, ++seed);
        for (int64_t m : {1, 2, 5, 33}) {
          const auto x = random_acts(m, cols, ++seed);
          const auto bias_v = test::random_vector(size_t(rows), ++seed);
          const float* bias = combo++ % 3 ? bias_v.data() : nullptr;  // with and without, every m
          const std::string what = std::string(ggml_type_name(t)) + " [" + std::to_string(rows) + ", " +
                                   std::to_string(cols) + "] m=" + std::to_string(m) + (bias ? " bias" : "");
          std::vector<float> ref(size_t(m * rows)), lin(ref.size(), NAN), dec(ref.size(), NAN);
          linear_ref(mx.w, x.data(), bias, ref.data(), m);
          linear(mx.w, x.data(), bias, lin.data(), m);
          linear_decode(mx.w, x.data(), bias, dec.data(), m);
          const auto tol = bounds(mx, x, bias, m);
          EXPECT_TRUE(within(lin, ref, tol)) << what << " linear";
          EXPECT_TRUE(within(dec, ref, tol)) << what << " linear_decode";
          // The bounds must be tight enough to catch a wrong row / block / bias.
          if (rows >= 3) {
            std::vector<float> wrong(ref);
            std::swap(wrong[0], wrong[1]);
            if (std::abs(ref[0] - ref[1]) > 2 * std::max(tol[0], tol[1])) {
              EXPECT_FALSE(within(wrong, ref, tol)) << what << " bound too loose";
            }
          }

          // Each decode row is what m = 1 gives for it, from linear and linear_decode alike.
          for (int64_t i = 0; i < m; ++i) {
            float one[129], one_lin[129];
            linear_decode(mx.w, x.data() + i * cols, bias, one, 1);
            linear(mx.w, x.data() + i * cols, bias, one_lin, 1);
            EXPECT_TRUE(bit_equal(dec.data() + i * rows, one, size_t(rows))) << what << " row " << i;
            EXPECT_TRUE(bit_equal(one_lin, one, size_t(rows))) << what << " row " << i << " linear(m=1)";
          }
          if (t == GgmlType::f32) {  // F32 is ops/matmul, unchanged
            std::vector<float> mm(ref.size()), mmd(ref.size());
            matmul(x.data(), mx.values.data(), bias, mm.data(), m, cols, rows);
            matmul_decode(x.data(), mx.values.data(), bias, mmd.data(), m, cols, rows);
            EXPECT_TRUE(bit_equal(lin.data(), mm.data(), mm.size())) << what;
            EXPECT_TRUE(bit_equal(dec.data(), mmd.data(), mmd.size())) << what;
          } else {
            const auto want = decode_by_kernels(mx, x, bias, m);
            EXPECT_TRUE(bit_equal(dec.data(), want.data(), want.size())) << what << " decode vs its kernels";
          }
        }
      }
    }
  }
}

// Both prefill designs on their own, the panel one with panels of 16 rows so that a
// matrix spans several panels and a short last one; then linear() at a prefill size.
TEST(Linear, RowAndPanelPathsAgainstReference) {
  uint64_t seed = 5000;
  for (GgmlType t : all_types) {
    const int64_t rows = 45, cols = col_sizes(t).back(), m = 19;
    const Matrix mx = random_matrix(t, rows, cols, ++seed);
    const auto x = random_acts(m, cols, ++seed);
    const auto bias = test::random_vector(size_t(rows), ++seed);
    std::vector<float> ref(size_t(m * rows)), got(ref.size());
    linear_ref(mx.w, x.data(), bias.data(), ref.data(), m);
    const auto tol = bounds(mx, x, bias.data(), m);
    for (int64_t panel : {int64_t(0), int64_t(16)}) {
      std::fill(got.begin(), got.end(), NAN);
      linear_panels(mx.w, x.data(), bias.data(), got.data(), m, panel);
      EXPECT_TRUE(within(got, ref, tol)) << ggml_type_name(t) << " panels of " << panel;
    }
    std::fill(got.begin(), got.end(), NAN);
    linear_rows(mx.w, x.data(), bias.data(), got.data(), m);
    EXPECT_TRUE(within(got, ref, tol)) << ggml_type_name(t) << " rows";

    // linear() past the crossover (whichever design it picks on this machine).
    const int64_t big_m = 50;
    const auto xb = random_acts(big_m, cols, ++seed);
    std::vector<float> ref_b(size_t(big_m * rows)), got_b(ref_b.size(), NAN);
    linear_ref(mx.w, xb.data(), bias.data(), ref_b.data(), big_m);
    linear(mx.w, xb.data(), bias.data(), got_b.data(), big_m);
    EXPECT_TRUE(within(got_b, ref_b, bounds(mx, xb, bias.data(), big_m))) << ggml_type_name(t) << " m=" << big_m;
  }
}

// The bias is added after the product: y(bias) = fl(y(no bias) + bias), bit for bit.
TEST(Linear, BiasAddedAfterTheProduct) {
  uint64_t seed = 6000;
  for (GgmlType t : all_types) {
    const int64_t rows = 37, cols = col_sizes(t).front(), m = 5;
    const Matrix mx = random_matrix(t, rows, cols, ++seed);
    const auto x = random_acts(m, cols, ++seed);
    const auto bias = test::random_vector(size_t(rows), ++seed, 10.0f, 20.0f);
    std::vector<float> plain(size_t(m * rows)), with(plain.size()), want(plain.size());
    linear_decode(mx.w, x.data(), nullptr, plain.data(), m);
    linear_decode(mx.w, x.data(), bias.data(), with.data(), m);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t r = 0; r < rows; ++r) want[size_t(i * rows + r)] = plain[size_t(i * rows + r)] + bias[size_t(r)];
    EXPECT_TRUE(bit_equal(with.data(), want.data(), want.size())) << ggml_type_name(t);
  }
}

TEST(Linear, EmptyShapes) {
  const Matrix mx = random_matrix(GgmlType::q4_0, 3, 32, 7);
  float y[3] = {1, 2, 3};
  linear(mx.w, nullptr, nullptr, y, 0);  // m = 0 writes nothing
  EXPECT_EQ(y[0], 1.0f);
  // k = 0: y is the bias (or zero), for every path.
  const WeightMatrix empty_k = WeightMatrix::view(GgmlType::f16, nullptr, 3, 0, nullptr);
  const float bias[3] = {0.5f, -1.0f, 2.0f};
  for (int64_t m : {1, 2, 40}) {
    std::vector<float> out(size_t(3 * m), NAN);
    linear(empty_k, nullptr, bias, out.data(), m);
    for (int64_t i = 0; i < m; ++i)
      for (int r = 0; r < 3; ++r) EXPECT_EQ(out[size_t(i * 3 + r)], bias[r]);
  }
  const WeightMatrix no_rows = WeightMatrix::view(GgmlType::q6_k, nullptr, 0, 256, nullptr);
  EXPECT_TRUE(no_rows.empty());
  linear(no_rows, nullptr, nullptr, nullptr, 4);
}

// dequantize_rows / to_f32 give dequantize_row's values, F16 through F16C included.
TEST(WeightMatrix, DequantizeRowsMatchesDequantizeRow) {
  uint64_t seed = 7000;
  for (GgmlType t : all_types) {
    const int64_t rows = 9, cols = col_sizes(t).back();
    const Matrix mx = random_matrix(t, rows, cols, ++seed);
    const auto all = mx.w.to_f32();
    EXPECT_TRUE(bit_equal(all.data(), mx.values.data(), all.size())) << ggml_type_name(t);
    std::vector<float> part(size_t(3 * cols));
    mx.w.dequantize_rows(4, 7, part.data());
    EXPECT_TRUE(bit_equal(part.data(), mx.values.data() + 4 * cols, part.size())) << ggml_type_name(t);
    EXPECT_EQ(mx.w.bytes(), uint64_t(rows) * ggml_row_bytes(t, cols));
  }
  const Matrix mx = random_matrix(GgmlType::q8_0, 4, 32, 1);
  std::vector<float> out(64);
  EXPECT_THROW(mx.w.dequantize_rows(3, 5, out.data()), Error);
}

// A copy of an owned F32 matrix has its own values: valid after the original is gone.
TEST(WeightMatrix, CopyOfOwnedMatrixOutlivesOriginal) {
  WeightMatrix copy;
  {
    const WeightMatrix original = WeightMatrix::from_f32({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, 2, 3);
    copy = original;
    const WeightMatrix constructed(original);
    EXPECT_NE(constructed.f32(), original.f32());
    EXPECT_EQ(constructed.f32()[4], 5.0f);
  }
  ASSERT_NE(copy.f32(), nullptr);
  EXPECT_EQ(copy.f32()[5], 6.0f);
  EXPECT_EQ(copy.row_bytes(), 12u);
  const float x[3] = {1.0f, 1.0f, 1.0f};
  float y[2];
  linear(copy, x, nullptr, y, 1);
  EXPECT_EQ(y[0], 6.0f);
  EXPECT_EQ(y[1], 15.0f);
}

::testing::AssertionResult throws_naming(const std::function<void()>& fn, const std::vector<std::string>& words) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& w : words)
      if (msg.find(w) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << msg << "\" does not name " << w;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no oscar::Error";
}

TEST(WeightMatrix, ViewRefusesUnsupportedTypesAndBadShapes) {
  const std::vector<uint8_t> buf(4096, 0);
  const void* p = buf.data();
  EXPECT_TRUE(throws_naming([&] { WeightMatrix::view(GgmlType::q2_k, p, 2, 256, nullptr); }, {"Q2_K", "[2, 256]"}));
  EXPECT_TRUE(throws_naming([&] { WeightMatrix::view(GgmlType::q8_1, p, 2, 32, nullptr); }, {"Q8_1"}));
  EXPECT_TRUE(throws_naming([&] { WeightMatrix::view(GgmlType::i32, p, 2, 32, nullptr); }, {"I32"}));
  EXPECT_TRUE(throws_naming([&] { WeightMatrix::view(GgmlType::q4_0, p, 2, 48, nullptr); }, {"Q4_0", "[2, 48]"}));
  EXPECT_TRUE(throws_naming([&] { WeightMatrix::view(GgmlType::q4_k, p, 1, 128, nullptr); }, {"Q4_K", "[1, 128]"}));
  EXPECT_TRUE(throws_naming([&] { WeightMatrix::view(GgmlType::f16, p, -1, 8, nullptr); }, {"F16", "[-1, 8]"}));
  EXPECT_TRUE(throws_naming([&] { WeightMatrix::view(GgmlType::q8_0, nullptr, 2, 32, nullptr); }, {"Q8_0"}));
  EXPECT_TRUE(throws_naming([&] { WeightMatrix::from_f32(std::vector<float>(5), 2, 3); }, {"[2, 3]"}));
  EXPECT_NO_THROW(WeightMatrix::view(GgmlType::bf16, p, 2, 7, nullptr));
}

// The F16 / BF16 kernels: two-row = one-row bit for bit, AVX2 and reference within
// f32 rounding of each other ((k + 1)·u·Σ|w·x| each way), on rows at odd byte offsets.
// (use_avx2() reads OSCAR_NO_AVX2 once per process, so the references behind it are
// checked here directly rather than by flipping the variable.)
TEST(Fdot, KernelsAgreeForEveryTail) {
  uint64_t seed = 8000;
  for (GgmlType t : {GgmlType::f16, GgmlType::bf16}) {
    for (int64_t k = 1; k <= 80; k += (k < 40 ? 1 : 13)) {
      const Matrix mx = random_matrix(t, 1, k, ++seed);
      std::vector<uint8_t> shifted(mx.bytes.size() + 1);
      std::memcpy(shifted.data() + 1, mx.bytes.data(), mx.bytes.size());
      const void* w = shifted.data() + 1;
      const auto x0 = random_acts(1, k, ++seed), x1 = random_acts(1, k, ++seed);
      double s = 0.0, exact = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        s += std::abs(double(mx.values[size_t(p)]) * x0[size_t(p)]);
        exact += double(mx.values[size_t(p)]) * x0[size_t(p)];
      }
      const double tol = double(k + 1) * u32 * s;
      const float ref = fdot_ref_kernel(t)(w, x0.data(), k);
      EXPECT_NEAR(ref, exact, tol) << ggml_type_name(t) << " k=" << k;
      float two[2];
      fdot2_ref_kernel(t)(w, x0.data(), x1.data(), k, two);
      EXPECT_EQ(two[0], ref);
      EXPECT_EQ(two[1], fdot_ref_kernel(t)(w, x1.data(), k));
      if (!cpu_has_avx2()) continue;
      const float fast = fdot_avx2_kernel(t)(w, x0.data(), k);
      EXPECT_NEAR(fast, exact, tol) << ggml_type_name(t) << " k=" << k;
      fdot2_avx2_kernel(t)(w, x0.data(), x1.data(), k, two);
      EXPECT_TRUE(bit_equal(&two[0], &fast, 1)) << ggml_type_name(t) << " k=" << k;
      const float fast1 = fdot_avx2_kernel(t)(w, x1.data(), k);
      EXPECT_TRUE(bit_equal(&two[1], &fast1, 1)) << ggml_type_name(t) << " k=" << k;
    }
  }
  EXPECT_EQ(fdot_ref_kernel(GgmlType::q4_0), nullptr);
  EXPECT_EQ(fdot_avx2_kernel(GgmlType::f32), nullptr);
}

}  // namespace
}  // namespace oscar::qmat
