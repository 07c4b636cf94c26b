// The K-quant activation quantizer (ActQ8KBlock: AVX2 bytes equal the reference's, round
// trip within half a step, bsums) and the K-quant integer dot products (Q4_K, Q5_K, Q6_K):
// the scalar references against a double-precision dot of the dequantized row, the AVX2
// kernels against the references, the four-row kernels bit for bit against the one-row
// kernel, and all against the unquantized activations within the 8-bit activation error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../test_util.h"
#include "oscar/core/dtype.h"
#include "oscar/formats/block_fields.h"
#include "oscar/formats/ggml_type.h"
#include "oscar/ops/cpu_features.h"
#include "oscar/qmat/qdot.h"
#include "qdot4_check.h"

namespace oscar {
namespace {

using qmat::ActQ8KBlock;

constexpr double u32 = 1.0 / (1 << 24);  // unit roundoff of f32

struct Format {
  GgmlType type;
  qmat::QDotKFn ref;
  qmat::QDotKFn avx2;
};

const Format formats[] = {
    {GgmlType::q4_k, qmat::qdot_q4_k_ref, qmat::qdot_q4_k_avx2},
    {GgmlType::q5_k, qmat::qdot_q5_k_ref, qmat::qdot_q5_k_avx2},
    {GgmlType::q6_k, qmat::qdot_q6_k_ref, qmat::qdot_q6_k_avx2},
};

// One super-block (256), two, and the Qwen2.5-1.5B row lengths.
const int64_t sizes[] = {256, 512, 1536, 8960};

// Our own activation quantizer (the contract of qdot.h's quantize_act_k_ref), so these
// tests do not lean on that one: d = max|x|/127 per 256, q = x·(1/d) rounded to nearest
// even, bsums per 16.
std::vector<ActQ8KBlock> quantize_act_k(const std::vector<float>& x) {
  std::vector<ActQ8KBlock> out(x.size() / 256);
  for (size_t b = 0; b < out.size(); ++b) {
    const float* xb = x.data() + 256 * b;
    float amax = 0.0f;
    for (int i = 0; i < 256; ++i) amax = std::max(amax, std::abs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    out[b].d = d;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 16 * g; i < 16 * g + 16; ++i) {
        out[b].q[i] = int8_t(std::nearbyint(xb[i] * id));
        sum += out[b].q[i];
      }
      out[b].bsums[g] = int16_t(sum);
    }
  }
  return out;
}

// Activations in [-1, 1] times a per-32 factor in [0.05, 20] (so that the 256-element
// scale is set by a few loud sub-blocks, as in a real hidden state), with every third
// super-block all zero when there are several.
std::vector<float> random_act(int64_t k, uint64_t seed) {
  std::vector<float> x = test::random_vector(size_t(k), seed);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_real_distribution<float> log_scale(std::log(0.05f), std::log(20.0f));
  for (int64_t b = 0; b < k / 32; ++b) {
    const float s = (k > 256 && (b / 8) % 3 == 1) ? 0.0f : std::exp(log_scale(rng));
    for (int i = 0; i < 32; ++i) x[size_t(32 * b + i)] *= s;
  }
  return x;
}

void put_half(uint8_t* p, float v) {
  const uint16_t bits = f32_to_fp16(v).bits;
  std::memcpy(p, &bits, 2);
}

// `rows` random rows of k elements: random bytes (every scale, min and quant pattern,
// Q6_K's int8 scales included) with the fp16 d / dmin drawn by `scale`. The rows start
// `offset` bytes into the buffer, to test unaligned reads.
template <class Dist>
std::vector<uint8_t> random_rows_scaled(GgmlType t, int64_t k, int64_t rows, uint64_t seed, Dist scale,
                                        size_t offset = 0) {
  const int64_t row_bytes = int64_t(ggml_row_bytes(t, k));
  const int64_t bb = ggml_block_bytes(t);
  std::vector<uint8_t> buf(offset + size_t(rows * row_bytes));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
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

std::vector<uint8_t> random_rows(GgmlType t, int64_t k, int64_t rows, uint64_t seed, size_t offset = 0) {
  return random_rows_scaled(t, k, rows, seed, std::uniform_real_distribution<float>(0.0f, 0.01f), offset);
}

// Per element, the size of the part a kernel adds and takes off again: it sums the
// unsigned codes and subtracts Q4_K / Q5_K's dmin·m or Q6_K's 32·d·sc, so its terms are
// bounded by |w| + 2·dmin·m, or |w| + 64·d·|sc| (with |q − 32| ≤ |w|/(d|sc|)).
std::vector<double> offsets(GgmlType t, const uint8_t* row, int64_t k) {
  std::vector<double> off(static_cast<size_t>(k));
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = row + b * ggml_block_bytes(t);
    for (int i = 0; i < 256; ++i) {
      double o;
      if (t == GgmlType::q6_k) {
        o = 64.0 * double(block_half(blk + 208)) * std::abs(double(int8_t(blk[192 + i / 16])));
      } else {
        uint8_t sc, m;
        k4_scale_min(i / 32, blk + 4, &sc, &m);
        o = 2.0 * double(block_half(blk + 2)) * double(m);
      }
      off[size_t(256 * b + i)] = o;
    }
  }
  return off;
}

struct Exact {
  double dot;  // Σ w[i]·(x.d·x.q[i]) in double, w the f32 dequantized row
  double mag;  // Σ (|w[i]| + offset[i])·|x.d·x.q[i]|, the scale of every rounding error
};

Exact exact_dot(GgmlType t, const uint8_t* row, const std::vector<ActQ8KBlock>& xq, int64_t k) {
  std::vector<float> w(static_cast<size_t>(k));
  dequantize_row(t, row, w.data(), k);
  const auto off = offsets(t, row, k);
  Exact e{0.0, 0.0};
  for (size_t i = 0; i < w.size(); ++i) {
    const double xi = double(xq[i / 256].d) * double(xq[i / 256].q[i % 256]);
    e.dot += double(w[i]) * xi;
    e.mag += (std::abs(double(w[i])) + off[i]) * std::abs(xi);
  }
  return e;
}

// The reference against the exact dot of its dequantized row: the f32 products d·x.d and
// dmin·x.d round once each (u), the dequantized w[i] carry ≤ 3 roundings of d·sc·q and
// dmin·m, and the result is rounded to f32 once: ≤ 5u·mag. A wrong 32-element sub-block
// (~mag·32/k) is ≥ 10^4× larger at k = 8960.
double ref_tolerance(const Exact& e) { return 5.0 * u32 * e.mag; }

// AVX2 against the reference: the same integer sums (their f32 conversion exact, or for
// Q6_K off by ≤ 2 units of a lane past 2^24), then per lane 2 FMAs a super-block into an
// f32 accumulator and 3 levels of the horizontal sum: ≤ (2·k/256 + 6)·u·mag, with the
// reference's own final rounding.
double avx2_tolerance(int64_t k, const Exact& e) { return double(2 * k / 256 + 6) * u32 * e.mag; }

TEST(QuantizeActK, Avx2BytesEqualReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  uint64_t seed = 10;
  for (int64_t k : sizes) {
    for (int rep = 0; rep < 3; ++rep) {
      auto x = random_act(k, ++seed);
      if (rep == 2) {  // values on a half-integer grid: x·(1/d) lands on exact .5 ties
        for (float& v : x) v = std::round(v * 8.0f) / 2.0f;
        for (int64_t b = 0; b < k / 256; ++b) x[size_t(b * 256 + 77)] = 127.0f;  // d = 1
      }
      std::vector<ActQ8KBlock> ref(size_t(k / 256)), got(size_t(k / 256));
      std::memset(static_cast<void*>(ref.data()), 0xab, ref.size() * sizeof(ActQ8KBlock));
      std::memset(static_cast<void*>(got.data()), 0xcd, got.size() * sizeof(ActQ8KBlock));
      qmat::quantize_act_k_ref(x.data(), ref.data(), k);
      qmat::quantize_act_k_avx2(x.data(), got.data(), k);
      for (size_t b = 0; b < ref.size(); ++b)
        EXPECT_EQ(std::memcmp(&got[b], &ref[b], sizeof(ActQ8KBlock)), 0)
            << "k=" << k << " rep=" << rep << " super-block " << b << ": d " << got[b].d << " vs " << ref[b].d;
    }
  }
}

// Both quantizers give this file's own quantize_act_k (its bytes, ties to even), d = 0
// and zero codes and sums for an all-zero super-block, and |d·q − x| ≤ d·(1/2 + 400u)
// (the rounding of 1/d and of x·(1/d), ≤ 127·3 ulps of a unit step).
TEST(QuantizeActK, MatchesContractAndRoundTripsWithinHalfStep) {
  std::vector<void (*)(const float*, ActQ8KBlock*, int64_t)> fns = {qmat::quantize_act_k_ref};
  if (cpu_has_avx2()) fns.push_back(qmat::quantize_act_k_avx2);
  uint64_t seed = 50;
  for (int64_t k : sizes) {
    auto x = random_act(k, ++seed);
    std::fill(x.begin(), x.begin() + 256, 0.0f);  // the first super-block all zero
    if (k > 256) {  // the second one on a grid of exact .5 ties: ±2.5, ±0.5, 126.5, with d = 1
      for (int i = 0; i < 256; ++i) x[size_t(256 + i)] = float((i % 5) - 2) + 0.5f;
      x[256 + 200] = 127.0f;
      x[256 + 201] = 126.5f;
    }
    const auto want = quantize_act_k(x);
    if (k > 256) {
      EXPECT_EQ(want[1].d, 1.0f);
      EXPECT_EQ(want[1].q[0], -2);  // -1.5 → -2
      EXPECT_EQ(want[1].q[1], 0);   // -0.5 → 0
      EXPECT_EQ(want[1].q[2], 0);   //  0.5 → 0
      EXPECT_EQ(want[1].q[3], 2);   //  1.5 → 2
      EXPECT_EQ(want[1].q[4], 2);   //  2.5 → 2
      EXPECT_EQ(want[1].q[201], 126);
    }
    for (auto fn : fns) {
      std::vector<ActQ8KBlock> got(size_t(k / 256));
      fn(x.data(), got.data(), k);
      EXPECT_EQ(got[0].d, 0.0f);
      for (size_t b = 0; b < got.size(); ++b) {
        ASSERT_EQ(std::memcmp(&got[b], &want[b], sizeof(ActQ8KBlock)), 0) << "k=" << k << " super-block " << b;
        for (int i = 0; i < 256; ++i) {
          const double xi = x[256 * b + size_t(i)];
          ASSERT_LE(std::abs(double(got[b].d) * got[b].q[i] - xi), double(got[b].d) * (0.5 + 400 * u32))
              << "k=" << k << " super-block " << b << " element " << i;
        }
      }
    }
  }
}

// (a) The scalar references equal the double dot of dequantize_row(w) with the quantized
// activations within ref_tolerance, on 3 and 5 rows of every length.
TEST(QdotKquantRef, MatchesDequantizedDoubleDot) {
  uint64_t seed = 1000;
  for (const Format& f : formats) {
    for (int64_t k : sizes) {
      for (int64_t rows : {3, 5}) {
        const auto w = random_rows(f.type, k, rows, ++seed);
        const auto act = quantize_act_k(random_act(k, ++seed));
        const int64_t row_bytes = int64_t(ggml_row_bytes(f.type, k));
        for (int64_t r = 0; r < rows; ++r) {
          const uint8_t* row = w.data() + r * row_bytes;
          const Exact e = exact_dot(f.type, row, act, k);
          const float got = f.ref(row, act.data(), k);
          EXPECT_NEAR(got, e.dot, ref_tolerance(e)) << ggml_type_name(f.type) << " k=" << k << " row " << r;
        }
      }
    }
  }
}

// (b) The AVX2 kernels against the references, on rows that start at odd addresses.
TEST(QdotKquantAvx2, MatchesReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  uint64_t seed = 2000;
  for (const Format& f : formats) {
    for (int64_t k : sizes) {
      const int64_t rows = 5;
      const size_t offset = 3;
      const auto w = random_rows(f.type, k, rows, ++seed, offset);
      const auto act = quantize_act_k(random_act(k, ++seed));
      const int64_t row_bytes = int64_t(ggml_row_bytes(f.type, k));
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w.data() + offset + r * row_bytes;
        const Exact e = exact_dot(f.type, row, act, k);
        const double ref = f.ref(row, act.data(), k);
        const double got = f.avx2(row, act.data(), k);
        EXPECT_NEAR(got, ref, avx2_tolerance(k, e)) << ggml_type_name(f.type) << " k=" << k << " row " << r;
      }
    }
  }
}

// Scales at the ends of their ranges: fp16 d / dmin from subnormal (6e-8) to 65504, and
// activation super-blocks from 1e-30 to 1e25 (zero ones between), through the
// reference and the AVX2 kernel alike.
TEST(QdotKquant, ExtremeScales) {
  uint64_t seed = 4000;
  const float w_scales[] = {6e-8f, 1e-4f, 1.0f, 65504.0f};
  const float x_scales[] = {1e-30f, 0.0f, 1e-3f, 1e25f, 0.0f, 1.0f};
  for (const Format& f : formats) {
    const int64_t k = 1536, rows = 3;
    std::mt19937_64 pick(seed);
    const auto w = random_rows_scaled(f.type, k, rows, ++seed, [&](std::mt19937_64&) { return w_scales[pick() % 4]; });
    auto x = test::random_vector(static_cast<size_t>(k), ++seed);
    for (int64_t b = 0; b < k / 256; ++b)
      for (int i = 0; i < 256; ++i) x[size_t(256 * b + i)] *= x_scales[b];
    const auto act = quantize_act_k(x);
    const int64_t row_bytes = int64_t(ggml_row_bytes(f.type, k));
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = w.data() + r * row_bytes;
      const Exact e = exact_dot(f.type, row, act, k);
      const double ref = f.ref(row, act.data(), k);
      EXPECT_NEAR(ref, e.dot, ref_tolerance(e)) << ggml_type_name(f.type) << " row " << r;
      if (cpu_has_avx2()) {
        EXPECT_NEAR(f.avx2(row, act.data(), k), ref, avx2_tolerance(k, e)) << ggml_type_name(f.type) << " row " << r;
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
    const qmat::QDot4KFn dot4 = qmat::qdot4_k_avx2_kernel(f.type);
    ASSERT_NE(dot4, nullptr) << ggml_type_name(f.type);
    for (int64_t k : sizes) {
      const auto w = random_rows(f.type, k, 1, ++seed, 0);
      std::vector<std::vector<ActQ8KBlock>> rows;
      for (int r = 0; r < 4; ++r) rows.push_back(quantize_act_k(random_act(k, ++seed)));
      qmat::expect_four_rows_equal_one(dot4, f.avx2, w.data(), k, rows, k / 256 + 3, ggml_type_name(f.type));
    }
  }
}

// The largest products the formats allow: every weight code at its maximum (15, 31, 63),
// 6-bit scales and mins at 63, Q6_K scales at −128, activations at ±127 (bsums ±2032).
// These are the inputs that would saturate a maddubs pair or a 16-bit sum if the bounds
// were wrong.
TEST(QdotKquant, ExtremeValuesDoNotSaturate) {
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
      std::vector<float> x(static_cast<size_t>(k));
      for (int64_t i = 0; i < k; ++i)  // all +127, all −127, or alternating signs (d = 0.01)
        x[size_t(i)] = 1.27f * (pattern == 0 ? 1.0f : pattern == 1 ? -1.0f : (i % 2 ? 1.0f : -1.0f));
      const auto act = quantize_act_k(x);
      ASSERT_EQ(std::abs(act[0].q[0]), 127);
      const Exact e = exact_dot(f.type, w.data(), act, k);
      const double ref = f.ref(w.data(), act.data(), k);
      EXPECT_NEAR(ref, e.dot, ref_tolerance(e)) << ggml_type_name(f.type) << " pattern " << pattern;
      if (cpu_has_avx2()) {
        EXPECT_NEAR(f.avx2(w.data(), act.data(), k), ref, avx2_tolerance(k, e))
            << ggml_type_name(f.type) << " pattern " << pattern;
      }
    }
  }
}

// (c) Against the unquantized activations: each x[i] is off from d·q[i] by at most
// d·(1/2 + 400u) with d the super-block's max|x|/127, so the error is bounded by
// Σ_i |w[i]|·d·(1/2 + 400u) plus the f32 error of (a) / (b).
TEST(QdotKquant, WithinActivationQuantizationBound) {
  uint64_t seed = 3000;
  for (const Format& f : formats) {
    for (int64_t k : sizes) {
      const int64_t rows = 3;
      const auto w = random_rows(f.type, k, rows, ++seed);
      const auto x = random_act(k, ++seed);
      const auto act = quantize_act_k(x);
      const int64_t row_bytes = int64_t(ggml_row_bytes(f.type, k));
      std::vector<float> wf(static_cast<size_t>(k));
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w.data() + r * row_bytes;
        dequantize_row(f.type, row, wf.data(), k);
        double exact = 0.0, bound = 0.0;
        for (int64_t i = 0; i < k; ++i) {
          exact += double(wf[size_t(i)]) * double(x[size_t(i)]);
          bound += std::abs(double(wf[size_t(i)])) * double(act[size_t(i / 256)].d) * (0.5 + 400 * u32);
        }
        const Exact e = exact_dot(f.type, row, act, k);
        bound += ref_tolerance(e) + avx2_tolerance(k, e);
        std::vector<qmat::QDotKFn> fns = {f.ref};
        if (cpu_has_avx2()) fns.push_back(f.avx2);
        for (qmat::QDotKFn fn : fns) {
          const double got = fn(row, act.data(), k);
          EXPECT_NEAR(got, exact, bound) << ggml_type_name(f.type) << " k=" << k << " row " << r;
        }
      }
    }
  }
}

TEST(QdotKquantDispatch, TablesReturnTheKKernels) {
  for (const Format& f : formats) {
    EXPECT_EQ(qmat::qdot_act_format(f.type), qmat::ActFormat::q8_k) << ggml_type_name(f.type);
    EXPECT_EQ(qmat::qdot_k_ref_kernel(f.type), f.ref) << ggml_type_name(f.type);
    EXPECT_EQ(qmat::qdot_k_avx2_kernel(f.type), f.avx2) << ggml_type_name(f.type);
    EXPECT_EQ(qmat::qdot_ref_kernel(f.type), nullptr) << ggml_type_name(f.type);
  }
  EXPECT_EQ(qmat::qdot_act_format(GgmlType::q4_0), qmat::ActFormat::q8);
  EXPECT_EQ(qmat::qdot_act_format(GgmlType::q2_k), qmat::ActFormat::none);
  EXPECT_EQ(qmat::qdot_k_ref_kernel(GgmlType::q2_k), nullptr);
  EXPECT_EQ(qmat::qdot_k_avx2_kernel(GgmlType::q8_k), nullptr);
  EXPECT_EQ(qmat::qdot4_k_avx2_kernel(GgmlType::q4_0), nullptr);
}

}  // namespace
}  // namespace oscar
