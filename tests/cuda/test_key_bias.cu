// key_bias_scores (key_bias.h) against a host reference in double: c·cs(t)·log2(e)/√d with
// cos and sin of t·position_scale·inv_freq[i] in double, for every key of every row, within
// 4e-6·log2(e)/√d·Σ|c| (cs(t) from angle sums in f32 is off by a few 2^-24, and so is each
// product of the f32 sum), at positions up to 150K (large angles), neox frequencies of both
// widths and a linear position scale; entries past each row's length keep their poison.
// Self-check: the reference one position later must fail.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "oscar/cuda/key_bias.h"

namespace {

using namespace oscar_cuda_test;

struct Case {
  int d, n_heads;
  double freq_base, position_scale;
  std::vector<int> lens;
};

// Worst error in units of the tolerance (pos_shift moves the reference's positions); every
// entry past a row's length must still be NaN.
double run_case(const Case& c, uint32_t seed, int pos_shift, std::string* detail) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 30.0f);  // coefficients of a large bias (Qwen2.5's)
  const int B = int(c.lens.size()), d = c.d, H = c.n_heads;
  int max_len = 0;
  for (int t : c.lens) max_len = std::max(max_len, t);
  const int stride = max_len + 7;
  std::vector<double> inv_freq(size_t(d / 2));
  for (int i = 0; i < d / 2; ++i) inv_freq[size_t(i)] = std::pow(c.freq_base, -2.0 * i / d);
  std::vector<float> coef(size_t(B) * H * d);
  for (float& x : coef) x = g(rng);
  const std::vector<float> table = oscar::cuda::key_bias_cs_table(inv_freq, c.position_scale);
  DeviceBuffer d_coef = DeviceBuffer::from(coef), d_len = DeviceBuffer::from(c.lens),
               d_if = DeviceBuffer::from(inv_freq), d_table = DeviceBuffer::from(table),
               d_out = DeviceBuffer::from(std::vector<float>(size_t(B) * H * stride, NAN));
  oscar::cuda::KeyBiasScoresParams p;
  p.batch = B, p.n_heads = H, p.head_dim = d;
  p.coef = d_coef.as<float>(), p.seq_len = d_len.as<int32_t>(), p.inv_freq = d_if.as<double>();
  p.position_scale = c.position_scale, p.cs_table = d_table.as<float>();
  p.max_seq_len = max_len, p.out = d_out.as<float>(), p.out_stride = stride;
  oscar::cuda::key_bias_scores(p);
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<float> out = download<float>(d_out, size_t(B) * H * stride);
  const double qscale = 1.4426950408889634 / std::sqrt(double(d));
  double worst = 0.0;
  std::vector<double> cs(static_cast<size_t>(d));
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < stride; ++t) {
      if (t >= c.lens[size_t(b)]) {
        for (int h = 0; h < H; ++h)
          if (!std::isnan(out[(size_t(b) * H + h) * stride + t])) worst = INFINITY, *detail = "an entry past the length was written";
        continue;
      }
      for (int i = 0; i < d / 2; ++i) {
        const double a = double(t + pos_shift) * c.position_scale * inv_freq[size_t(i)];
        cs[size_t(i)] = std::cos(a), cs[size_t(d / 2 + i)] = std::sin(a);
      }
      for (int h = 0; h < H; ++h) {
        const float* ch = coef.data() + (size_t(b) * H + h) * d;
        double want = 0.0, mag = 0.0;
        for (int k = 0; k < d; ++k) want += double(ch[k]) * cs[size_t(k)], mag += std::fabs(double(ch[k]));
        want *= qscale;
        const double e = std::fabs(double(out[(size_t(b) * H + h) * stride + t]) - want) / (4e-6 * qscale * mag);
        if (!(e <= worst)) {
          worst = std::isnan(e) ? INFINITY : e;
          *detail = "row " + std::to_string(b) + " head " + std::to_string(h) + " key " + std::to_string(t);
        }
      }
    }
  }
  return worst;
}

}  // namespace

namespace oscar_cuda_test {

void run_key_bias_tests(uint32_t seed) {
  const Case cases[] = {
      {128, 12, 1e6, 1.0, {1, 65, 4097, 64, 0}},  // Qwen2.5 heads; lengths 0, 1, one past a block
      {64, 4, 1e4, 0.25, {150001, 97}},           // d 64, linear scaling, positions to 150K
  };
  for (const Case& c : cases) {
    std::string detail;
    const double e = run_case(c, seed++, 0, &detail);
    char line[200];
    std::snprintf(line, sizeof line, "key_bias_scores d%d H%d scale %.2f: worst error %.3f of the tolerance (%s)", c.d,
                  c.n_heads, c.position_scale, e, detail.c_str());
    report(e <= 1.0, line);
  }
  std::string detail;
  const double shifted = run_case(cases[0], seed, 1, &detail);
  report(shifted > 1.0, "key_bias_scores self-check: reference one position later fails (" + std::to_string(shifted) +
                            " of the tolerance)");
  oscar::cuda::KeyBiasScoresParams bad;
  bad.batch = 1, bad.n_heads = 4, bad.head_dim = 96;
  const std::string msg = error_of([&] { oscar::cuda::key_bias_scores(bad); });
  report(msg.find("head_dim 96") != std::string::npos, "key_bias_scores refuses head_dim 96: " + msg);
}

}  // namespace oscar_cuda_test
