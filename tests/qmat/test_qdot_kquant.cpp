// The K-quant integer dot products (Q4_K, Q5_K, Q6_K): the scalar references against a
// double-precision dot of the dequantized row, the AVX2 kernels against the references,
// and both against the unquantized activations within the 8-bit activation error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../test_util.h"
#include "oscar/core/dtype.h"
#include "oscar/formats/ggml_type.h"
#include "oscar/ops/cpu_features.h"
#include "oscar/qmat/qdot.h"
#include "qdot4_check.h"

namespace oscar {
namespace {

using qmat::ActQ8Block;

constexpr double eps32 = std::numeric_limits<float>::epsilon();  // 2^-23

struct Format {
  GgmlType type;
  qmat::QDotFn ref;
  qmat::QDotFn avx2;
};

const Format formats[] = {
    {GgmlType::q4_k, qmat::qdot_q4_k_ref, qmat::qdot_q4_k_avx2},
    {GgmlType::q5_k, qmat::qdot_q5_k_ref, qmat::qdot_q5_k_avx2},
    {GgmlType::q6_k, qmat::qdot_q6_k_ref, qmat::qdot_q6_k_avx2},
};

const int64_t sizes[] = {256, 512, 1536, 8960};

// Our own activation quantizer (the contract of qdot.h's quantize_act_ref), so these
// tests do not lean on that one: d = max|x|/127, q = x·(1/d) rounded to nearest even.
std::vector<ActQ8Block> quantize_act(const std::vector<float>& x) {
  std::vector<ActQ8Block> out(x.size() / 32);
  for (size_t b = 0; b < out.size(); ++b) {
    const float* xb = x.data() + 32 * b;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      out[b].q[i] = int8_t(std::nearbyint(xb[i] * id));
      sum += out[b].q[i];
    }
    out[b].d = d;
    out[b].sum = d * float(sum);
  }
  return out;
}

// Activations in [-1, 1] times a per-block factor in [0.05, 20], so that x.d varies
// from block to block as it does in a real hidden state.
std::vector<float> random_act(int64_t k, uint64_t seed) {
  std::vector<float> x = test::random_vector(size_t(k), seed);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_real_distribution<float> log_scale(std::log(0.05f), std::log(20.0f));
  for (int64_t b = 0; b < k / 32; ++b) {
    const float s = std::exp(log_scale(rng));
    for (int i = 0; i < 32; ++i) x[size_t(32 * b + i)] *= s;
  }
  return x;
}

void put_half(uint8_t* p, float v) {
  const uint16_t bits = f32_to_fp16(v).bits;
  std::memcpy(p, &bits, 2);
}

// `rows` random rows of k elements: random bytes (every scale, min and quant pattern,
// Q6_K's int8 scales included) with the fp16 d / dmin set to uniform [0, 0.01].
// The rows start `offset` bytes into the buffer, to test unaligned reads.
std::vector<uint8_t> random_rows(GgmlType t, int64_t k, int64_t rows, uint64_t seed, size_t offset = 0) {
  const int64_t row_bytes = int64_t(ggml_row_bytes(t, k));
  const int64_t bb = ggml_block_bytes(t);
  std::vector<uint8_t> buf(offset + size_t(rows * row_bytes));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.0f, 0.01f);
  for (size_t i = offset; i < buf.size(); ++i) buf[i] = uint8_t(byte(rng));
  for (int64_t b = 0; b < rows * k / 256; ++b) {
    uint8_t* blk = buf.data() + offset + size_t(b * bb);
    if (t == GgmlType::q6_k) {
      put_half(blk + 208, scale(rng));
    } else {
      put_half(blk, scale(rng));
      put_half(blk + 2, scale(rng));
    }
  }
  return buf;
}

struct Exact {
  double dot;      // Σ w[i]·(x.d·x.q[i]) in double
  double abs_dot;  // Σ |w[i]·x.d·x.q[i]|, the scale of every rounding error
};

Exact exact_dot(const std::vector<float>& w, const std::vector<ActQ8Block>& xq) {
  Exact e{0.0, 0.0};
  for (size_t i = 0; i < w.size(); ++i) {
    const double p = double(w[i]) * double(xq[i / 32].d) * double(xq[i / 32].q[i % 32]);
    e.dot += p;
    e.abs_dot += std::abs(p);
  }
  return e;
}

// Tolerance of a qdot against the exact dot of its dequantized row, in units of
// abs_dot = Σ|w·x|: the reference rounds each block term a few times (scales, x.d, the
// min term) and sums the k/32 block terms in f32; the dequantized w[i] carry ~2ε each.
// Over 2400 random rows (k = 256 … 8960) the worst error seen was 0.7ε·abs_dot, so 4ε
// leaves room while a wrong 32-element sub-block (~sqrt(32)·abs_dot/k) is ≥ 1000× larger.
double ref_tolerance(const Exact& e) { return 4.0 * eps32 * e.abs_dot; }

// (a) The scalar references equal the double dot of dequantize_row(w) with the quantized
// activations within f32 rounding.
TEST(QdotKquantRef, MatchesDequantizedDoubleDot) {
  uint64_t seed = 1000;
  for (const Format& f : formats) {
    for (int64_t k : sizes) {
      const int64_t rows = 4;
      const auto w = random_rows(f.type, k, rows, ++seed);
      const auto act = quantize_act(random_act(k, ++seed));
      const int64_t row_bytes = int64_t(ggml_row_bytes(f.type, k));
      std::vector<float> wf(static_cast<size_t>(k));
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w.data() + r * row_bytes;
        dequantize_row(f.type, row, wf.data(), k);
        const Exact e = exact_dot(wf, act);
        const float got = f.ref(row, act.data(), k);
        EXPECT_NEAR(got, e.dot, ref_tolerance(e)) << ggml_type_name(f.type) << " k=" << k << " row " << r;
      }
    }
  }
}

// (b) The AVX2 kernels against the references, on rows that start at odd addresses.
// Both are exact in their integer parts (|madd lanes| < 2^24, so the int→f32 conversion
// is exact) and differ only in the order and grouping of f32 products and sums, so the
// gap is f32 summation error: atol 1e-5·sqrt(k)·(mean |w·x|), the random-walk size of
// rounding in a k-term f32 sum with ~80ε of room, plus rtol 1e-5 for the last roundings.
// Over 2400 random rows the worst gap was 0.2 of this (about 0.6ε·Σ|w·x|).
TEST(QdotKquantAvx2, MatchesReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  uint64_t seed = 2000;
  for (const Format& f : formats) {
    for (int64_t k : sizes) {
      const int64_t rows = 5;
      const size_t offset = 3;
      const auto w = random_rows(f.type, k, rows, ++seed, offset);
      const auto act = quantize_act(random_act(k, ++seed));
      const int64_t row_bytes = int64_t(ggml_row_bytes(f.type, k));
      std::vector<float> wf(static_cast<size_t>(k));
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w.data() + offset + r * row_bytes;
        dequantize_row(f.type, row, wf.data(), k);
        const Exact e = exact_dot(wf, act);
        const double ref = f.ref(row, act.data(), k);
        const double got = f.avx2(row, act.data(), k);
        const double tol = 1e-5 * std::sqrt(double(k)) * (e.abs_dot / double(k)) + 1e-5 * std::abs(ref);
        EXPECT_NEAR(got, ref, tol) << ggml_type_name(f.type) << " k=" << k << " row " << r;
      }
    }
  }
}

// The four-row kernels give each activation row the one-row AVX2 kernel's result bit for
// bit (the multi-row prefill relies on it for batch invariance), with a row stride wider
// than k, on fresh random weights and activations.
TEST(QdotKquantAvx2, FourRowsEqualOneRowBitForBit) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  uint64_t seed = 5000;
  for (const Format& f : formats) {
    const qmat::QDot4Fn dot4 = qmat::qdot4_avx2_kernel(f.type);
    ASSERT_NE(dot4, nullptr) << ggml_type_name(f.type);
    for (int64_t k : sizes) {
      const auto w = random_rows(f.type, k, 1, ++seed, 0);
      std::vector<std::vector<ActQ8Block>> rows;
      for (int r = 0; r < 4; ++r) rows.push_back(quantize_act(random_act(k, ++seed)));
      qmat::expect_four_rows_equal_one(dot4, f.avx2, w.data(), k, rows, k / 32 + 8, ggml_type_name(f.type));
    }
  }
}

// The largest products the formats allow: every weight quant at its maximum (15, 31, 63),
// 6-bit scales and mins at 63, Q6_K scales at −128, activations at ±127. These are the
// inputs that would saturate a maddubs pair if the bounds were wrong.
TEST(QdotKquantAvx2, ExtremeValuesDoNotSaturate) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  const int64_t k = 512;
  for (const Format& f : formats) {
    for (int pattern = 0; pattern < 3; ++pattern) {
      std::vector<uint8_t> w(ggml_row_bytes(f.type, k), 0xff);
      for (int64_t b = 0; b < k / 256; ++b) {
        uint8_t* blk = w.data() + b * ggml_block_bytes(f.type);
        if (f.type == GgmlType::q6_k) {
          std::memset(blk + 192, 0x80, 16);  // int8 scales −128
          put_half(blk + 208, 0.01f);
        } else {
          put_half(blk, 0.01f);
          put_half(blk + 2, 0.01f);
        }
      }
      std::vector<ActQ8Block> act(size_t(k / 32));
      for (size_t b = 0; b < act.size(); ++b) {
        int sum = 0;
        for (int i = 0; i < 32; ++i) {
          // all +127, all −127, or alternating signs
          const int v = pattern == 0 ? 127 : pattern == 1 ? -127 : (i % 2 ? 127 : -127);
          act[b].q[i] = int8_t(v);
          sum += v;
        }
        act[b].d = 0.01f;
        act[b].sum = 0.01f * float(sum);
      }
      std::vector<float> wf(static_cast<size_t>(k));
      dequantize_row(f.type, w.data(), wf.data(), k);
      const Exact e = exact_dot(wf, act);
      const double ref = f.ref(w.data(), act.data(), k);
      const double got = f.avx2(w.data(), act.data(), k);
      EXPECT_NEAR(ref, e.dot, ref_tolerance(e)) << ggml_type_name(f.type) << " pattern " << pattern;
      EXPECT_NEAR(got, ref, 1e-5 * std::abs(ref) + 1e-6 * e.abs_dot) << ggml_type_name(f.type) << " pattern " << pattern;
    }
  }
}

// (c) Against the unquantized activations: each x[i] is off from d·q[i] by at most d/2
// (round to nearest; the f32 x·(1/d) adds ~ε|x|), so the error is bounded by
// Σ_blocks d_x/2 · Σ|w[i]| plus the f32 error of (a).
TEST(QdotKquant, WithinActivationQuantizationBound) {
  uint64_t seed = 3000;
  for (const Format& f : formats) {
    for (int64_t k : sizes) {
      const int64_t rows = 3;
      const auto w = random_rows(f.type, k, rows, ++seed);
      const auto x = random_act(k, ++seed);
      const auto act = quantize_act(x);
      const int64_t row_bytes = int64_t(ggml_row_bytes(f.type, k));
      std::vector<float> wf(static_cast<size_t>(k));
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w.data() + r * row_bytes;
        dequantize_row(f.type, row, wf.data(), k);
        double exact = 0.0, bound = 0.0, abs_dot = 0.0;
        for (int64_t i = 0; i < k; ++i) {
          exact += double(wf[size_t(i)]) * double(x[size_t(i)]);
          abs_dot += std::abs(double(wf[size_t(i)]) * double(x[size_t(i)]));
          bound += std::abs(double(wf[size_t(i)])) * (0.5 * double(act[size_t(i / 32)].d) + eps32 * std::abs(x[size_t(i)]));
        }
        bound += 4.0 * eps32 * abs_dot * 1.01;
        std::vector<qmat::QDotFn> fns = {f.ref};
        if (cpu_has_avx2()) fns.push_back(f.avx2);
        for (qmat::QDotFn fn : fns) {
          const double got = fn(row, act.data(), k);
          EXPECT_NEAR(got, exact, bound) << ggml_type_name(f.type) << " k=" << k << " row " << r;
        }
      }
    }
  }
}

TEST(QdotKquantDispatch, TablesReturnTheKKernels) {
  for (const Format& f : formats) {
    EXPECT_EQ(qmat::qdot_ref_kernel(f.type), f.ref) << ggml_type_name(f.type);
    EXPECT_EQ(qmat::qdot_avx2_kernel(f.type), f.avx2) << ggml_type_name(f.type);
  }
  EXPECT_EQ(qmat::qdot_ref_kernel(GgmlType::q2_k), nullptr);
  EXPECT_EQ(qmat::qdot_avx2_kernel(GgmlType::q8_k), nullptr);
}

}  // namespace
}  // namespace oscar
