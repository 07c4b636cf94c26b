// The CUDA layer ops (elementwise.h) against host references that follow the CPU ops'
// formulas, on fresh random inputs with odd sizes; outputs start poisoned (NaN).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "oscar/cuda/elementwise.h"

namespace {

using namespace oscar_cuda_test;

std::vector<float> random_vec(size_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Largest |got − want| / (atol + rtol·|want|); ≤ 1 passes. NaN fails.
double worst(const std::vector<float>& got, const std::vector<double>& want, double atol, double rtol) {
  double w = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    w = std::max(w, std::fabs(double(got[i]) - want[i]) / (atol + rtol * std::fabs(want[i])));
  }
  return w;
}

void test_rmsnorm(int64_t rows, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<float> x = random_vec(size_t(rows) * n, rng, 3.0f), w = random_vec(size_t(n), rng);
  const float eps = 1e-6f;
  std::vector<double> want(x.size());
  for (int64_t r = 0; r < rows; ++r) {  // the CPU's rmsnorm
    double ss = 0.0;
    for (int i = 0; i < n; ++i) ss += double(x[size_t(r * n + i)]) * x[size_t(r * n + i)];
    const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
    for (int i = 0; i < n; ++i) want[size_t(r * n + i)] = x[size_t(r * n + i)] * inv * w[size_t(i)];
  }
  DeviceBuffer dx = DeviceBuffer::from(x), dw = DeviceBuffer::from(w), dy = DeviceBuffer::from(std::vector<float>(x.size(), NAN));
  oscar::cuda::rmsnorm(dx.as<float>(), dw.as<float>(), dy.as<float>(), rows, n, eps);
  CHECK_CUDA(cudaDeviceSynchronize());
  const double e = worst(download<float>(dy, x.size()), want, 1e-7, 2e-6);
  report(e <= 1.0, "rmsnorm rows " + std::to_string(rows) + " n " + std::to_string(n) + ": worst/tol " + std::to_string(e));
}

void test_rope(int64_t n_tokens, int n_heads, int d, bool interleaved, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x = random_vec(size_t(n_tokens) * n_heads * d, rng);
  std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
  std::uniform_int_distribution<int32_t> up(0, 131071);
  for (int32_t& p : pos) p = up(rng);
  pos[0] = 0;
  std::vector<double> inv(static_cast<size_t>(d / 2));
  for (int i = 0; i < d / 2; ++i) inv[size_t(i)] = std::pow(1e6, -2.0 * i / d);
  const double scale = 0.25;
  std::vector<double> want(x.begin(), x.end());
  for (int64_t t = 0; t < n_tokens; ++t)  // the CPU's rope_apply
    for (int i = 0; i < d / 2; ++i) {
      const double a = double(pos[size_t(t)]) * scale * inv[size_t(i)];
      const float cs = float(std::cos(a)), sn = float(std::sin(a));
      for (int h = 0; h < n_heads; ++h) {
        const size_t base = (size_t(t) * n_heads + h) * d;
        const int ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + d / 2;
        const float x0 = x[base + size_t(ia)], x1 = x[base + size_t(ib)];
        want[base + size_t(ia)] = x0 * cs - x1 * sn;
        want[base + size_t(ib)] = x0 * sn + x1 * cs;
      }
    }
  DeviceBuffer dx = DeviceBuffer::from(x), dp = DeviceBuffer::from(pos), di = DeviceBuffer::from(inv);
  oscar::cuda::rope(dx.as<float>(), dp.as<int32_t>(), di.as<double>(), scale, interleaved, n_tokens, n_heads, d);
  CHECK_CUDA(cudaDeviceSynchronize());
  const double e = worst(download<float>(dx, x.size()), want, 1e-6, 1e-6);
  report(e <= 1.0, std::string("rope ") + (interleaved ? "interleaved" : "neox") + " tokens " + std::to_string(n_tokens) +
                       " heads " + std::to_string(n_heads) + " d " + std::to_string(d) + ": worst/tol " + std::to_string(e));
}

void test_swiglu_add(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<float> g = random_vec(size_t(n), rng, 4.0f), u = random_vec(size_t(n), rng);
  std::vector<double> want_s(static_cast<size_t>(n)), want_a(static_cast<size_t>(n));
  for (size_t i = 0; i < size_t(n); ++i) {
    want_s[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    want_a[i] = double(g[i] + u[i]);
  }
  DeviceBuffer dg = DeviceBuffer::from(g), du = DeviceBuffer::from(u), da = DeviceBuffer::from(g);
  oscar::cuda::swiglu(dg.as<float>(), du.as<float>(), n);
  oscar::cuda::add_inplace(da.as<float>(), du.as<float>(), n);
  CHECK_CUDA(cudaDeviceSynchronize());
  const double es = worst(download<float>(dg, size_t(n)), want_s, 1e-7, 1e-6);
  const double ea = worst(download<float>(da, size_t(n)), want_a, 1e-300, 0.0);  // exact
  report(es <= 1.0, "swiglu n " + std::to_string(n) + ": worst/tol " + std::to_string(es));
  report(ea <= 1.0, "add_inplace n " + std::to_string(n) + ": exact");
}

void test_embed(uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t vocab = 1001;
  const int dim = 576;
  std::vector<uint16_t> table(size_t(vocab) * dim);
  for (uint16_t& b : table) b = f32_to_bf16(std::normal_distribution<float>(0.0f, 1.0f)(rng));
  const std::vector<int32_t> ids = {0, 1000, 17, 17, 500}, bad_ids = {3, 1001, -1};
  DeviceBuffer dt = DeviceBuffer::from(table), di = DeviceBuffer::from(ids), dbi = DeviceBuffer::from(bad_ids);
  DeviceBuffer out = DeviceBuffer::from(std::vector<float>(ids.size() * dim, NAN));
  DeviceBuffer out2 = DeviceBuffer::from(std::vector<float>(bad_ids.size() * dim, NAN));
  DeviceBuffer flag = DeviceBuffer::from(std::vector<int32_t>{0}), flag2 = DeviceBuffer::from(std::vector<int32_t>{0});
  oscar::cuda::embed_bf16(dt.as<uint16_t>(), vocab, dim, di.as<int32_t>(), int64_t(ids.size()), out.as<float>(), flag.as<int32_t>());
  oscar::cuda::embed_bf16(dt.as<uint16_t>(), vocab, dim, dbi.as<int32_t>(), int64_t(bad_ids.size()), out2.as<float>(),
                          flag2.as<int32_t>());
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = download<float>(out, ids.size() * dim), got2 = download<float>(out2, bad_ids.size() * dim);
  bool ok = download<int32_t>(flag, 1)[0] == 0 && download<int32_t>(flag2, 1)[0] == 1;
  for (size_t t = 0; t < ids.size(); ++t)
    for (int i = 0; i < dim; ++i) ok = ok && got[t * dim + size_t(i)] == bf16_to_f32(table[size_t(ids[t]) * dim + size_t(i)]);
  for (int i = 0; i < dim; ++i)
    ok = ok && got2[size_t(i)] == bf16_to_f32(table[size_t(3) * dim + size_t(i)]) && got2[size_t(dim + i)] == 0.0f &&
         got2[size_t(2 * dim + i)] == 0.0f;
  report(ok, "embed_bf16: rows exact, ids outside the vocabulary give zeros and raise the flag");
}

// n = 151936: float4 loads; an n that is not a multiple of 4: one value at a time.
void test_argmax(uint32_t seed, int64_t n) {
  std::mt19937 rng(seed);
  const int64_t rows = 4;
  std::vector<float> x = random_vec(size_t(rows * n), rng, 5.0f);
  // row 0: a tie of the maximum (the first wins); row 1: NaNs before the maximum; row 2: the
  // maximum at the last index; row 3: all equal.
  x[size_t(100)] = 1e4f, x[size_t(n * 3 / 5)] = 1e4f;
  x[size_t(n + 0)] = NAN, x[size_t(n + 5)] = NAN, x[size_t(n + 7)] = 1e4f;
  x[size_t(3 * n - 1)] = 1e4f;
  std::fill(x.begin() + 3 * n, x.end(), 0.5f);
  const std::vector<int32_t> want = {100, 7, int32_t(n - 1), 0};
  DeviceBuffer dx = DeviceBuffer::from(x), di = DeviceBuffer::from(std::vector<int32_t>(size_t(rows), -7));
  oscar::cuda::argmax_rows(dx.as<float>(), rows, n, di.as<int32_t>());
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<int32_t> got = download<int32_t>(di, size_t(rows));
  report(got == want, "argmax_rows (vocab " + std::to_string(n) + "): ties to the first, NaN never wins, last index, all equal -> " +
                          std::to_string(got[0]) + "," + std::to_string(got[1]) + "," + std::to_string(got[2]) + "," +
                          std::to_string(got[3]));
}

void test_param_checks() {
  const std::string msg = error_of([] { oscar::cuda::rope(nullptr, nullptr, nullptr, 1.0, false, 1, 2, 63); });
  report(msg.find("head_dim 63") != std::string::npos, "odd head_dim refused: \"" + msg + "\"");
}

}  // namespace

namespace oscar_cuda_test {

void run_elementwise_tests(uint32_t seed) {
  test_rmsnorm(1, 576, seed);
  test_rmsnorm(7, 4099, seed + 1);
  test_rmsnorm(3, 1, seed + 2);
  test_rope(5, 9, 64, false, seed + 3);
  test_rope(3, 2, 128, true, seed + 4);
  test_rope(1, 28, 128, false, seed + 5);
  test_swiglu_add(8960 * 3 + 1, seed + 6);
  test_embed(seed + 7);
  test_argmax(seed + 8, 151936);
  test_argmax(seed + 9, 49157);
  test_param_checks();
}

}  // namespace oscar_cuda_test
