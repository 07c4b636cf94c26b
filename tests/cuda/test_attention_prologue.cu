// The fused attention prologue (attention_prologue.h) against a host reference in double
// that applies the formulas in order (q/k RMSNorm per head, RoPE at the token's position,
// x·R_K for q and k, v·R_V), on fresh random inputs: the query rows within 1e-5·‖row‖ per
// element (f32 arithmetic on O(1) values), the K/V rows as BF16 within one BF16 step of the
// reference (2^-7 relative: an f32 value near a rounding midpoint may round either way,
// + 1e-6·‖row‖ for the f32 sums), every other cached row still
// poison. With --k-bias-split the key loses b_k before RoPE and the query's coefficients of its
// bias scores (α, β of q' after RoPE, before R_K: key_bias.h) are checked within
// 1e-5·‖q'‖·‖b‖. Self-checks: the reference at position + 1, a kernel without the key
// shift and one without the key bias must fail.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "oscar/cuda/attention_prologue.h"

namespace {

using namespace oscar_cuda_test;

constexpr int kPage = 16;
constexpr uint16_t kPoison = 0xFFFF;  // a NaN pattern no BF16 write produces here

struct Case {
  int batch, n_heads, n_kv, d;
  bool qk_norm, interleaved, rot_k, rot_v;
  bool k_shift = false;  // --k-mean: a vector per KV head subtracted from k after R_K
  bool k_bias = false;   // --k-bias-split: b_k per KV head taken out of k, q's coefficients out
  bool by_product = false;  // R_K left to the caller (k_out), then write_prologue_keys
};

// x·R for rows of d (the caller's product in the rotation-by-product form), in double.
std::vector<float> rotate_rows(const std::vector<float>& x, const std::vector<float>& R, int d) {
  std::vector<float> y(x.size());
  for (size_t r = 0; r < x.size() / size_t(d); ++r)
    for (int j = 0; j < d; ++j) {
      double s = 0;
      for (int i = 0; i < d; ++i) s += double(x[r * d + size_t(i)]) * double(R[size_t(i) * d + j]);
      y[r * d + size_t(j)] = float(s);
    }
  return y;
}

std::vector<float> normal_vec(size_t n, std::mt19937& rng, float sd) {
  std::normal_distribution<float> g(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

// Row-major orthogonal d×d (Gram–Schmidt of a random matrix, in double).
std::vector<float> orthogonal(int d, std::mt19937& rng) {
  std::normal_distribution<double> g;
  std::vector<double> m(size_t(d) * d);
  for (double& x : m) x = g(rng);
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < i; ++j) {
      double dot = 0;
      for (int k = 0; k < d; ++k) dot += m[size_t(i) * d + k] * m[size_t(j) * d + k];
      for (int k = 0; k < d; ++k) m[size_t(i) * d + k] -= dot * m[size_t(j) * d + k];
    }
    double n = 0;
    for (int k = 0; k < d; ++k) n += m[size_t(i) * d + k] * m[size_t(i) * d + k];
    for (int k = 0; k < d; ++k) m[size_t(i) * d + k] /= std::sqrt(n);
  }
  return std::vector<float>(m.begin(), m.end());
}

// The reference for one row: norm (w may be empty), RoPE (rope: false skips), rotation.
std::vector<double> reference_row(const float* x, int d, const std::vector<float>& w, float eps, bool rope, double p,
                                  const std::vector<double>& inv_freq, bool interleaved, const std::vector<float>& R) {
  std::vector<double> y(x, x + d);
  if (!w.empty()) {
    double ss = 0;
    for (double v : y) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / d + double(eps));
    for (int i = 0; i < d; ++i) y[size_t(i)] *= inv * double(w[size_t(i)]);
  }
  if (rope)
    for (int i = 0; i < d / 2; ++i) {
      const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + d / 2;
      const double c = std::cos(p * inv_freq[size_t(i)]), s = std::sin(p * inv_freq[size_t(i)]);
      const double x0 = y[size_t(a)], x1 = y[size_t(b)];
      y[size_t(a)] = x0 * c - x1 * s;
      y[size_t(b)] = x0 * s + x1 * c;
    }
  if (!R.empty()) {
    std::vector<double> z(size_t(d), 0.0);
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) z[size_t(j)] += y[size_t(i)] * double(R[size_t(i) * d + j]);
    y = z;
  }
  return y;
}

double norm2(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

// Worst error over the case, in units of the tolerance (≤ 1 passes); pos_shift moves the
// reference's positions (the self-check).
double run_case(const Case& c, uint32_t seed, int pos_shift, std::string* detail, bool drop_k_shift = false,
                bool drop_k_bias = false) {
  std::mt19937 rng(seed);
  const int B = c.batch, H = c.n_heads, Hkv = c.n_kv, d = c.d;
  const std::vector<float> q = normal_vec(size_t(B) * H * d, rng, 2.0f), k = normal_vec(size_t(B) * Hkv * d, rng, 2.0f),
                           v = normal_vec(size_t(B) * Hkv * d, rng, 1.0f);
  std::vector<float> qn, kn, rk, rv;
  if (c.qk_norm) {
    qn = normal_vec(size_t(d), rng, 0.3f), kn = normal_vec(size_t(d), rng, 0.3f);
    for (float& x : qn) x += 1.0f;
    for (float& x : kn) x += 1.0f;
  }
  if (c.rot_k) rk = orthogonal(d, rng);
  if (c.rot_v) rv = orthogonal(d, rng);
  const std::vector<float> shift = c.k_shift ? normal_vec(size_t(Hkv) * d, rng, 3.0f) : std::vector<float>();
  // A large bias, as Qwen2.5's: the key is its small remainder.
  const std::vector<float> kbias = c.k_bias ? normal_vec(size_t(Hkv) * d, rng, 20.0f) : std::vector<float>();
  std::vector<double> inv_freq(size_t(d / 2));
  for (int i = 0; i < d / 2; ++i) inv_freq[size_t(i)] = std::pow(1e6, -2.0 * i / d);
  const double scale = 0.5;
  // Positions up to 200K (large angles), each sequence its own page of a pool of 2B + 1.
  std::vector<int32_t> pos(static_cast<size_t>(B));
  constexpr int kMaxPos = 200000;
  const int stride = kMaxPos / kPage + 1;
  std::vector<int32_t> table(size_t(B) * stride, -1);
  std::uniform_int_distribution<int32_t> pick(0, kMaxPos);
  for (int b = 0; b < B; ++b) {
    pos[size_t(b)] = b == 0 ? 2 * kPage + 15 : pick(rng);  // one small position, the others anywhere
    table[size_t(b) * stride + size_t(pos[size_t(b)] / kPage)] = 2 * b + 1;
  }
  const int n_pages = 2 * B + 1;
  const size_t pool = size_t(n_pages) * Hkv * kPage * d;
  DeviceBuffer d_pos = DeviceBuffer::from(pos), d_q = DeviceBuffer::from(q), d_k = DeviceBuffer::from(k),
               d_v = DeviceBuffer::from(v), d_qn = DeviceBuffer::from(qn), d_kn = DeviceBuffer::from(kn),
               d_rk = DeviceBuffer::from(rk), d_rv = DeviceBuffer::from(rv), d_shift = DeviceBuffer::from(shift), d_if = DeviceBuffer::from(inv_freq),
               d_table = DeviceBuffer::from(table);
  DeviceBuffer d_qo = DeviceBuffer::from(std::vector<float>(q.size(), NAN));
  DeviceBuffer d_kb = DeviceBuffer::from(kbias), d_coef = DeviceBuffer::from(std::vector<float>(q.size(), NAN));
  DeviceBuffer d_fk = DeviceBuffer::from(std::vector<uint16_t>(pool, kPoison)),
               d_fv = DeviceBuffer::from(std::vector<uint16_t>(pool, kPoison));
  oscar::cuda::AttentionPrologueParams p;
  p.batch = B, p.n_heads = H, p.n_kv_heads = Hkv, p.head_dim = d;
  p.pos = d_pos.as<int32_t>(), p.q = d_q.as<float>(), p.k = d_k.as<float>(), p.v = d_v.as<float>();
  p.q_norm = c.qk_norm ? d_qn.as<float>() : nullptr, p.k_norm = c.qk_norm ? d_kn.as<float>() : nullptr;
  p.eps = 1e-6f, p.inv_freq = d_if.as<double>(), p.position_scale = scale, p.interleaved = c.interleaved;
  p.rot_k = c.rot_k ? d_rk.as<float>() : nullptr, p.rot_v = c.rot_v ? d_rv.as<float>() : nullptr;
  p.k_shift = c.k_shift && !drop_k_shift ? d_shift.as<float>() : nullptr;
  if (c.k_bias && !drop_k_bias) p.k_bias = d_kb.as<float>(), p.q_coef = d_coef.as<float>();
  p.q_out = d_qo.as<float>(), p.fp_k = d_fk.as<uint16_t>(), p.fp_v = d_fv.as<uint16_t>();
  p.fp_blocks = d_table.as<int32_t>(), p.fp_blocks_stride = stride;
  DeviceBuffer d_ko = DeviceBuffer::from(std::vector<float>(k.size(), NAN));
  if (c.by_product) p.rot_k = nullptr, p.k_out = d_ko.as<float>();
  oscar::cuda::attention_prologue(p);
  CHECK_CUDA(cudaDeviceSynchronize());
  auto qo = download<float>(d_qo, q.size());
  if (c.by_product) {  // the caller's two products, then the keys into their pages
    qo = rotate_rows(qo, rk, d);
    const DeviceBuffer d_krot = DeviceBuffer::from(rotate_rows(download<float>(d_ko, k.size()), rk, d));
    oscar::cuda::write_prologue_keys(p, d_krot.as<float>());
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  const auto coef = c.k_bias ? download<float>(d_coef, q.size()) : std::vector<float>();
  const auto fk = download<uint16_t>(d_fk, pool), fv = download<uint16_t>(d_fv, pool);

  double worst = 0.0;
  auto note = [&](double e, const std::string& where) {
    if (!(e <= worst)) {
      worst = std::isnan(e) ? INFINITY : std::max(worst, e);
      *detail = where;
    }
  };
  std::vector<bool> written(pool / size_t(d), false);
  for (int b = 0; b < B; ++b) {
    const double pp = double(pos[size_t(b)] + pos_shift) * scale;
    for (int h = 0; h < H; ++h) {
      const size_t at = (size_t(b) * H + h) * d;
      const auto want = reference_row(q.data() + at, d, qn, 1e-6f, true, pp, inv_freq, c.interleaved, rk);
      const double tol = 1e-5 * norm2(want);
      for (int e = 0; e < d; ++e) note(std::fabs(double(qo[at + size_t(e)]) - want[size_t(e)]) / tol, "q row");
      if (c.k_bias && !drop_k_bias) {
        // q'·RoPE(b, t) = Σ_i α_i cos + β_i sin, q' before R_K (key_bias.h).
        const auto qr = reference_row(q.data() + at, d, qn, 1e-6f, true, pp, inv_freq, c.interleaved, {});
        const float* bh = kbias.data() + size_t(h / (H / Hkv)) * d;
        std::vector<double> bv(bh, bh + d);
        const double ctol = 1e-5 * norm2(qr) * norm2(bv);
        for (int i = 0; i < d / 2; ++i) {
          const int a = c.interleaved ? 2 * i : i, bb = c.interleaved ? 2 * i + 1 : i + d / 2;
          const double alpha = qr[size_t(a)] * bv[size_t(a)] + qr[size_t(bb)] * bv[size_t(bb)];
          const double beta = qr[size_t(bb)] * bv[size_t(a)] - qr[size_t(a)] * bv[size_t(bb)];
          note(std::fabs(double(coef[at + size_t(i)]) - alpha) / ctol, "bias coefficient alpha");
          note(std::fabs(double(coef[at + size_t(d / 2 + i)]) - beta) / ctol, "bias coefficient beta");
        }
      }
    }
    const int page = 2 * b + 1, t = pos[size_t(b)];
    for (int h = 0; h < Hkv; ++h) {
      const size_t at = (size_t(b) * Hkv + h) * d;
      const size_t row = (size_t(page) * Hkv + h) * kPage + size_t(t % kPage);
      written[row] = true;
      const auto wk = [&] {
        // --k-bias-split: the cache holds k − RoPE(b, t)·R_K (the reference takes it off after R_K).
        auto r = reference_row(k.data() + at, d, kn, 1e-6f, true, pp, inv_freq, c.interleaved, rk);
        if (c.k_bias) {
          const auto a = reference_row(kbias.data() + size_t(h) * d, d, {}, 0.0f, true, pp, inv_freq, c.interleaved, rk);
          for (int e = 0; e < d; ++e) r[size_t(e)] -= a[size_t(e)];
        }
        if (c.k_shift)
          for (int e = 0; e < d; ++e) r[size_t(e)] -= shift[size_t(h) * d + size_t(e)];
        return r;
      }();
      const auto wv = reference_row(v.data() + at, d, {}, 0.0f, false, 0.0, inv_freq, false, rv);
      for (const auto& [want, got] : {std::pair{&wk, &fk}, std::pair{&wv, &fv}}) {
        const double floor = 1e-6 * norm2(*want);
        for (int e = 0; e < d; ++e) {
          const double g = bf16_to_f32((*got)[row * d + size_t(e)]), w = (*want)[size_t(e)];
          note(std::fabs(g - w) / (std::fabs(w) * 0x1p-7 + floor), got == &fk ? "k row" : "v row");
        }
      }
    }
  }
  for (size_t r = 0; r < written.size(); ++r)
    if (!written[r])
      for (int e = 0; e < d; ++e)
        if (fk[r * d + size_t(e)] != kPoison || fv[r * d + size_t(e)] != kPoison) note(INFINITY, "a row that is not the token's was written");
  return worst;
}

}  // namespace

namespace oscar_cuda_test {

void run_attention_prologue_tests(uint32_t seed) {
  const Case cases[] = {
      {1, 32, 8, 128, true, false, true, false, true},  // Qwen3 shape, OSCAR (R_V absorbed, --k-mean)
      {3, 4, 2, 64, false, true, false, false},   // Llama GGUF (interleaved), BF16 KV
      {5, 6, 1, 128, false, false, true, true, true},  // Qwen2.5 GQA 6, both rotations, --k-mean
      {2, 8, 8, 64, true, true, true, true},      // MHA, everything
      {4, 12, 2, 128, false, false, true, false, true, true},  // Qwen2.5-1.5B, int2-oscar: --k-mean, --k-bias-split
      {3, 4, 2, 64, false, true, true, true, false, true},     // interleaved pairs, key bias, both rotations
      // A prefill's rows (from 64): 8 heads per CTA, including a partial last group.
      {70, 32, 8, 128, true, false, true, false, true},
      {65, 6, 1, 128, false, false, true, true, true},
      {64, 12, 2, 64, false, true, true, true, false, true},
      // The same with R_K by product (DeviceModel's form for a prefill's rows).
      {70, 32, 8, 128, true, false, true, false, true, false, true},
      {65, 6, 1, 128, false, false, true, true, true, false, true},
      {64, 12, 2, 64, false, true, true, true, false, true, true},
  };
  for (const Case& c : cases) {
    std::string detail;
    const double e = run_case(c, seed++, 0, &detail);
    const std::string name = "attention_prologue B" + std::to_string(c.batch) + " H" + std::to_string(c.n_heads) +
                             "/" + std::to_string(c.n_kv) + " d" + std::to_string(c.d) + (c.qk_norm ? " qk-norm" : "") +
                             (c.interleaved ? " interleaved" : " neox") + (c.rot_k ? " R_K" : "") +
                             (c.rot_v ? " R_V" : "") + (c.k_shift ? " k-shift" : "") + (c.k_bias ? " k-bias" : "") +
                             (c.by_product ? " R_K by product" : "");
    char line[300];
    std::snprintf(line, sizeof line, "%s: worst error %.3f of the tolerance (%s)", name.c_str(), e, detail.c_str());
    report(e <= 1.0, line);
  }
  std::string detail;
  const double shifted = run_case(cases[0], seed, /*pos_shift=*/1, &detail);
  report(shifted > 1.0, "attention_prologue self-check: reference one position later fails (" + std::to_string(shifted) + " of the tolerance)");
  const double unshifted = run_case(cases[0], seed, 0, &detail, /*drop_k_shift=*/true);
  report(unshifted > 1.0, "attention_prologue self-check: a kernel without the key shift fails (" +
                              std::to_string(unshifted) + " of the tolerance)");
  const double unbiased = run_case(cases[4], seed, 0, &detail, false, /*drop_k_bias=*/true);
  report(unbiased > 1.0, "attention_prologue self-check: a kernel that keeps the key bias fails (" +
                             std::to_string(unbiased) + " of the tolerance)");
  oscar::cuda::AttentionPrologueParams bad;
  bad.batch = 1, bad.n_heads = 4, bad.n_kv_heads = 2, bad.head_dim = 96, bad.fp_blocks_stride = 1;
  const std::string msg = error_of([&] { oscar::cuda::attention_prologue(bad); });
  report(msg.find("head_dim 96") != std::string::npos, "attention_prologue refuses head_dim 96: " + msg);
}

}  // namespace oscar_cuda_test
