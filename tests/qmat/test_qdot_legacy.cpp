// The activation quantizer (AVX2 byte-identical to the reference; round trip within half a
// step) and the legacy-quant dot products (Q4_0 … Q8_0): reference against a double sum of
// dequantized weights, AVX2 against reference, both against unquantized activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../test_util.h"
#include "oscar/core/dtype.h"
#include "oscar/formats/ggml_type.h"
#include "oscar/ops/cpu_features.h"
#include "oscar/qmat/qdot.h"
#include "qdot4_check.h"

namespace oscar::qmat {
namespace {

constexpr double f32_eps = 1.0 / (1 << 24);  // unit roundoff of f32

// Activations whose blocks differ in scale by up to 10^3, so a kernel that mixes up
// per-block scales shows; every fourth block (when k > 32) is all zero.
std::vector<float> random_acts(int64_t k, uint64_t seed) {
  auto x = test::random_vector(size_t(k), seed);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_real_distribution<float> exp10(-2.0f, 1.0f);
  for (int64_t b = 0; b < k / act_block; ++b) {
    const float s = (k > act_block && b % 4 == 1) ? 0.0f : std::pow(10.0f, exp10(rng));
    for (int64_t i = 0; i < act_block; ++i) x[size_t(b * act_block + i)] *= s;
  }
  return x;
}

std::vector<ActQ8Block> quantize(const std::vector<float>& x) {
  std::vector<ActQ8Block> q(x.size() / act_block);
  quantize_act_ref(x.data(), q.data(), int64_t(x.size()));
  return q;
}

::testing::AssertionResult same_blocks(const std::vector<ActQ8Block>& a, const std::vector<ActQ8Block>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(ActQ8Block)) != 0)
      return ::testing::AssertionFailure() << "block " << i << " differs: d " << a[i].d << " vs " << b[i].d
                                           << ", sum " << a[i].sum << " vs " << b[i].sum;
  }
  return ::testing::AssertionSuccess();
}

TEST(QuantizeAct, Avx2BytesEqualReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  uint64_t seed = 10;
  for (int64_t k : {32, 64, 576, 1536}) {
    for (int rep = 0; rep < 3; ++rep) {
      auto x = random_acts(k, ++seed);
      if (rep == 2) {  // values on a half-integer grid: x·(1/d) lands on exact .5 ties
        for (float& v : x) v = std::round(v * 8.0f) / 2.0f;
        for (int64_t b = 0; b < k / act_block; ++b) x[size_t(b * act_block + 3)] = 127.0f;  // d = 1
      }
      std::vector<ActQ8Block> ref(size_t(k / act_block)), got(size_t(k / act_block));
      std::memset(static_cast<void*>(ref.data()), 0xab, ref.size() * sizeof(ActQ8Block));
      std::memset(static_cast<void*>(got.data()), 0xcd, got.size() * sizeof(ActQ8Block));
      quantize_act_ref(x.data(), ref.data(), k);
      quantize_act_avx2(x.data(), got.data(), k);
      EXPECT_TRUE(same_blocks(got, ref)) << "k=" << k << " rep=" << rep;
    }
  }
}

// Scales that make d exact (1 and 1/2) put x·(1/d) on .5 ties: nearest even wins.
TEST(QuantizeAct, TiesRoundToEvenAndZeroBlock) {
  std::vector<float> x(3 * act_block, 0.0f);
  const float a[] = {127.0f, 2.5f, -2.5f, 3.5f, 0.5f, -0.5f, 1.5f, 126.5f, -126.5f, -3.0f};
  const int qa[] = {127, 2, -2, 4, 0, 0, 2, 126, -126, -3};
  const float b[] = {-63.5f, 1.25f, -0.75f, 0.25f, 63.25f, 0.75f};  // d = 0.5, 1/d = 2
  const int qb[] = {-127, 2, -2, 0, 126, 2};
  std::copy(std::begin(a), std::end(a), x.begin());
  std::copy(std::begin(b), std::end(b), x.begin() + act_block);
  // block 2 stays all zero
  using QuantFn = void (*)(const float*, ActQ8Block*, int64_t);
  std::vector<QuantFn> fns = {quantize_act_ref};
  if (cpu_has_avx2()) fns.push_back(quantize_act_avx2);
  for (QuantFn fn : fns) {
    ActQ8Block q[3];
    fn(x.data(), q, 3 * act_block);
    EXPECT_EQ(q[0].d, 1.0f);
    EXPECT_EQ(q[1].d, 0.5f);
    int sa = 0, sb = 0;
    for (int i = 0; i < act_block; ++i) {
      const int wa = i < 10 ? qa[i] : 0, wb = i < 6 ? qb[i] : 0;
      EXPECT_EQ(q[0].q[i], wa) << "block 0 element " << i;
      EXPECT_EQ(q[1].q[i], wb) << "block 1 element " << i;
      EXPECT_EQ(q[2].q[i], 0);
      sa += wa;
      sb += wb;
    }
    EXPECT_EQ(q[0].sum, float(sa));
    EXPECT_EQ(q[1].sum, 0.5f * float(sb));
    EXPECT_EQ(q[2].d, 0.0f);
    EXPECT_EQ(q[2].sum, 0.0f);
  }
}

// |d·q − x| ≤ d/2, plus the rounding of 1/d and of x·(1/d) (≤ 127·3 ulps of a unit step).
TEST(QuantizeAct, RoundTripWithinHalfStep) {
  uint64_t seed = 50;
  for (int64_t k : {32, 64, 576, 1536}) {
    const auto x = random_acts(k, ++seed);
    const auto q = quantize(x);
    for (int64_t b = 0; b < k / act_block; ++b) {
      const ActQ8Block& blk = q[size_t(b)];
      float amax = 0.0f;
      int s = 0;
      for (int i = 0; i < act_block; ++i) {
        const double xi = x[size_t(b * act_block + i)];
        amax = std::max(amax, float(std::abs(xi)));
        ASSERT_LE(std::abs(double(blk.d) * blk.q[i] - xi), double(blk.d) * (0.5 + 400 * f32_eps))
            << "k=" << k << " block " << b << " element " << i;
        s += blk.q[i];
      }
      EXPECT_EQ(blk.d, amax / 127.0f);
      EXPECT_EQ(blk.sum, blk.d * float(s));
    }
  }
}

struct Legacy {
  GgmlType type;
  QDotFn ref, avx2;
  bool has_min;  // an f16 minimum right after the f16 scale
};
const Legacy legacy_formats[] = {
    {GgmlType::q4_0, qdot_q4_0_ref, qdot_q4_0_avx2, false},
    {GgmlType::q4_1, qdot_q4_1_ref, qdot_q4_1_avx2, true},
    {GgmlType::q5_0, qdot_q5_0_ref, qdot_q5_0_avx2, false},
    {GgmlType::q5_1, qdot_q5_1_ref, qdot_q5_1_avx2, true},
    {GgmlType::q8_0, qdot_q8_0_ref, qdot_q8_0_avx2, false},
};

float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return fp16_to_f32(fp16{bits});
}

// A weight row of random bytes (every code pattern, Q8_0's −128 included) with sane
// f16 scale and minimum fields in [−0.05, 0.05], placed `offset` bytes into the buffer.
std::vector<uint8_t> random_weights(const Legacy& f, int64_t k, uint64_t seed, size_t offset = 0) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  const int64_t bb = ggml_block_bytes(f.type);
  std::vector<uint8_t> w(offset + size_t(ggml_row_bytes(f.type, k)));
  for (uint8_t& c : w) c = uint8_t(byte(rng));
  for (int64_t b = 0; b < k / act_block; ++b) {
    uint8_t* p = w.data() + offset + b * bb;
    const fp16 d = f32_to_fp16(scale(rng)), m = f32_to_fp16(scale(rng));
    std::memcpy(p, &d.bits, 2);
    if (f.has_min) std::memcpy(p + 2, &m.bits, 2);
  }
  return w;
}

// Exact Σ dequant(w)·(d_x·q_x) in double, and the magnitude M = Σ (|w_i| + |m_w|)·|d_x·q_x|
// that bounds the f32 rounding of any evaluation order of the kernel's formula.
struct Exact {
  double dot = 0.0, mag = 0.0;
};
Exact exact_dot(const Legacy& f, const uint8_t* w, const std::vector<ActQ8Block>& x, int64_t k) {
  std::vector<float> deq(static_cast<size_t>(k));
  dequantize_row(f.type, w, deq.data(), k);
  const int64_t bb = ggml_block_bytes(f.type);
  Exact e;
  for (int64_t b = 0; b < k / act_block; ++b) {
    const double m = f.has_min ? std::abs(double(half_at(w + b * bb + 2))) : 0.0;
    for (int i = 0; i < act_block; ++i) {
      const double wi = deq[size_t(b * act_block + i)], xi = double(x[size_t(b)].d) * x[size_t(b)].q[i];
      e.dot += wi * xi;
      e.mag += (std::abs(wi) + m) * std::abs(xi);
    }
  }
  return e;
}

// f32 error of the kernels' formula: per block ≤ 4 roundings (d_w·d_x, ·Σ, m_w·sum_x and
// sum_x itself) of terms bounded by that block's share of M, plus ≤ nb − 1 roundings in
// the sum across blocks; Q4_1/Q5_1's dequantized w_i carry one more. Doubled for margin.
double f32_tol(int64_t k, double mag) { return 2.0 * double(k / act_block + 5) * f32_eps * mag; }

const int64_t row_sizes[] = {32, 64, 576, 1536, 4096};

TEST(QdotLegacy, ReferenceMatchesDequantizedDot) {
  for (const Legacy& f : legacy_formats) {
    uint64_t seed = 1000 + uint64_t(f.type) * 100;
    for (int64_t k : row_sizes) {
      for (int row = 0; row < 3; ++row) {
        const auto w = random_weights(f, k, ++seed);
        const auto x = quantize(random_acts(k, ++seed));
        const Exact e = exact_dot(f, w.data(), x, k);
        const float got = f.ref(w.data(), x.data(), k);
        EXPECT_NEAR(got, e.dot, f32_tol(k, e.mag)) << ggml_type_name(f.type) << " k=" << k << " row " << row;
      }
    }
  }
}

// Both kernels sit within f32_tol of the exact value, hence within twice it of each other.
// Rows start at odd byte offsets: weight rows in a GGUF need not be aligned.
TEST(QdotLegacy, Avx2MatchesReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  for (const Legacy& f : legacy_formats) {
    uint64_t seed = 2000 + uint64_t(f.type) * 100;
    for (int64_t k : row_sizes) {
      for (size_t offset : {0, 1, 3}) {
        const auto w = random_weights(f, k, ++seed, offset);
        const auto x = quantize(random_acts(k, ++seed));
        const Exact e = exact_dot(f, w.data() + offset, x, k);
        const float ref = f.ref(w.data() + offset, x.data(), k);
        const float got = f.avx2(w.data() + offset, x.data(), k);
        EXPECT_NEAR(got, ref, 2.0 * f32_tol(k, e.mag)) << ggml_type_name(f.type) << " k=" << k << " offset " << offset;
        EXPECT_NEAR(got, e.dot, f32_tol(k, e.mag)) << ggml_type_name(f.type) << " k=" << k << " offset " << offset;
      }
    }
  }
}

// Against the unquantized activations the only extra error is the activations' rounding:
// |x_i − d_x·q_i| ≤ d_x·(1/2 + tiny), so |Σ w·x − Σ w·x̂| ≤ Σ_blocks d_x/2 · Σ|w_i|.
TEST(QdotLegacy, WithinActivationQuantizationError) {
  const bool avx2 = cpu_has_avx2();
  for (const Legacy& f : legacy_formats) {
    uint64_t seed = 3000 + uint64_t(f.type) * 100;
    for (int64_t k : row_sizes) {
      for (int row = 0; row < 3; ++row) {
        const auto w = random_weights(f, k, ++seed);
        const auto xf = random_acts(k, ++seed);
        const auto x = quantize(xf);
        std::vector<float> deq(static_cast<size_t>(k));
        dequantize_row(f.type, w.data(), deq.data(), k);
        double want = 0.0, bound = 0.0;
        for (int64_t b = 0; b < k / act_block; ++b) {
          double wabs = 0.0;
          for (int i = 0; i < act_block; ++i) {
            const size_t j = size_t(b * act_block + i);
            want += double(deq[j]) * double(xf[j]);
            wabs += std::abs(double(deq[j]));
          }
          bound += double(x[size_t(b)].d) * (0.5 + 400 * f32_eps) * wabs;
        }
        const double tol = bound + f32_tol(k, exact_dot(f, w.data(), x, k).mag);
        EXPECT_NEAR(f.ref(w.data(), x.data(), k), want, tol) << ggml_type_name(f.type) << " k=" << k;
        if (avx2) {
          EXPECT_NEAR(f.avx2(w.data(), x.data(), k), want, tol) << ggml_type_name(f.type) << " k=" << k;
        }
      }
    }
  }
}

TEST(QdotLegacy, KernelTables) {
  for (const Legacy& f : legacy_formats) {
    EXPECT_EQ(qdot_ref_kernel(f.type), f.ref) << ggml_type_name(f.type);
    EXPECT_EQ(qdot_avx2_kernel(f.type), f.avx2) << ggml_type_name(f.type);
  }
  for (GgmlType t : {GgmlType::f32, GgmlType::f16, GgmlType::bf16, GgmlType::q8_1, GgmlType::q2_k}) {
    EXPECT_EQ(qdot_ref_kernel(t), nullptr) << ggml_type_name(t);
    EXPECT_EQ(qdot_avx2_kernel(t), nullptr) << ggml_type_name(t);
  }
}

// The four-row kernels give, for each activation row, the one-row AVX2 kernel's result
// bit for bit (the multi-row prefill relies on it for batch invariance), on fresh random
// weights and activations, with odd and even block counts and a row stride wider than k.
TEST(QdotLegacyAvx2, FourRowsEqualOneRowBitForBit) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  for (const Legacy& f : legacy_formats) {
    const QDot4Fn dot4 = qdot4_avx2_kernel(f.type);
    ASSERT_NE(dot4, nullptr) << ggml_type_name(f.type);
    uint64_t seed = 7000 + uint64_t(f.type) * 100;
    for (int64_t k : {int64_t(32), int64_t(96), int64_t(576), int64_t(1536)}) {
      const auto w = random_weights(f, k, ++seed);
      std::vector<std::vector<ActQ8Block>> rows;
      for (int r = 0; r < 4; ++r) rows.push_back(quantize(random_acts(k, ++seed)));
      expect_four_rows_equal_one(dot4, f.avx2, w.data(), k, rows, k / act_block + 3, ggml_type_name(f.type));
    }
  }
}


}  // namespace
}  // namespace oscar::qmat
