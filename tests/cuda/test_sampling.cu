// GPU sampling (sampling.h) against a host reference of the same chain in double, on fresh
// random logits with ties, −inf and NaN: with the same uniform per row the id must be the
// same, except where u·total falls within 1e-9 (relative) of a cumulative boundary, where
// f32 exponentials may tip it (those rows are counted, not compared). A self-check: the
// ids drawn with 1 − u must differ somewhere.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "oscar/cuda/sampling.h"

namespace {

using namespace oscar_cuda_test;
using oscar::cuda::SampleParams;

// The reference: returns the id, and in *margin the distance of u·total from the nearest
// boundary relative to total (0 for argmax rows).
int32_t reference(const float* row, int64_t n, const SampleParams& p, double u, double* margin) {
  *margin = 1.0;
  auto better = [&](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
  std::vector<int64_t> order;
  for (int64_t j = 0; j < n; ++j)
    if (!std::isnan(row[j])) order.push_back(j);
  if (order.empty()) return 0;
  std::sort(order.begin(), order.end(), better);
  if (p.temperature <= 0.0f) return int32_t(order[0]);
  int kept = int(std::min<int64_t>(p.top_k, int64_t(order.size())));
  const double m = row[order[0]];
  if (p.top_p < 1.0f) {
    double z = 0.0;
    for (int j = 0; j < kept; ++j) z += std::exp(double(row[order[size_t(j)]]) - m);
    double cum = 0.0;
    for (int j = 0; j < kept; ++j) {
      cum += std::exp(double(row[order[size_t(j)]]) - m);
      if (cum >= double(p.top_p) * z) {
        kept = j + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    const double thr = m + std::log(double(p.min_p));
    while (kept > 1 && double(row[order[size_t(kept - 1)]]) < thr && double(row[order[size_t(kept - 1)]]) != m) --kept;
  }
  std::vector<double> w(static_cast<size_t>(kept));
  double total = 0.0;
  for (int j = 0; j < kept; ++j) total += w[size_t(j)] = std::exp((double(row[order[size_t(j)]]) - m) / p.temperature);
  const double target = u * total;
  double cum = 0.0;
  for (int j = 0; j < kept; ++j) {
    const double before = cum;
    cum += w[size_t(j)];
    *margin = std::min(*margin, std::fabs(target - cum) / total);
    if (target < cum) {
      *margin = std::min(*margin, std::fabs(target - before) / total);
      return int32_t(order[size_t(j)]);
    }
  }
  return int32_t(order[size_t(kept - 1)]);
}

void run_case(int64_t n, const SampleParams& p, uint32_t seed, const std::string& name) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 3.0f);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const int rows = 24;
  std::vector<float> logits(size_t(rows) * size_t(n));
  for (float& x : logits) x = std::round(g(rng) * 64.0f) / 64.0f;  // coarse values: many ties
  if (n > 8) {
    logits[3] = NAN;                  // row 0: a NaN never wins
    logits[size_t(n) + 2] = -INFINITY;
    logits[size_t(n) * 2 + 5] = 1e4f;  // row 2: one token far ahead
  }
  std::vector<double> u(static_cast<size_t>(rows)), u_flip(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) u[size_t(r)] = uni(rng), u_flip[size_t(r)] = 1.0 - u[size_t(r)];
  DeviceBuffer d_l = DeviceBuffer::from(logits), d_u = DeviceBuffer::from(u), d_uf = DeviceBuffer::from(u_flip);
  DeviceBuffer d_ids = DeviceBuffer::from(std::vector<int32_t>(size_t(rows), -7));
  DeviceBuffer d_ids2 = DeviceBuffer::from(std::vector<int32_t>(size_t(rows), -7));
  oscar::cuda::sample_rows(d_l.as<float>(), rows, n, p, d_u.as<double>(), d_ids.as<int32_t>());
  oscar::cuda::sample_rows(d_l.as<float>(), rows, n, p, d_uf.as<double>(), d_ids2.as<int32_t>());
  CHECK_CUDA(cudaDeviceSynchronize());
  const auto ids = download<int32_t>(d_ids, size_t(rows)), ids2 = download<int32_t>(d_ids2, size_t(rows));
  int same = 0, near_edge = 0, differ_flip = 0, wrong = 0;
  for (int r = 0; r < rows; ++r) {
    double margin = 0.0;
    const int32_t want = reference(logits.data() + size_t(r) * size_t(n), n, p, u[size_t(r)], &margin);
    if (margin < 1e-9) {
      ++near_edge;
    } else if (ids[size_t(r)] == want) {
      ++same;
    } else {
      ++wrong;
    }
    differ_flip += ids2[size_t(r)] != ids[size_t(r)];
  }
  report(wrong == 0 && same + near_edge == rows,
         "sample_rows " + name + " n " + std::to_string(n) + ": " + std::to_string(same) + "/" + std::to_string(rows) +
             " ids equal the reference (" + std::to_string(near_edge) + " on an edge, " + std::to_string(wrong) +
             " wrong)");
  if (p.temperature > 0.0f && p.top_k > 1 && n > 8)
    report(differ_flip > 0, "sample_rows " + name + " n " + std::to_string(n) + " self-check: 1 − u changes " +
                                std::to_string(differ_flip) + " ids");
}

}  // namespace

namespace oscar_cuda_test {

void run_sampling_tests(uint32_t seed) {
  const SampleParams defaults{0.8f, 40, 0.95f, 0.05f};
  const SampleParams hot{1.5f, 64, 1.0f, 0.0f};
  const SampleParams tight{1.0f, 10, 0.5f, 0.2f};
  const SampleParams top1{0.7f, 1, 0.9f, 0.1f};
  const SampleParams greedy{0.0f, 40, 0.95f, 0.05f};
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000), int64_t(151936)}) {
    run_case(n, defaults, seed++, "T 0.8 k 40 p 0.95 min-p 0.05");
    run_case(n, hot, seed++, "T 1.5 k 64 (no top-p / min-p)");
    run_case(n, tight, seed++, "T 1 k 10 p 0.5 min-p 0.2");
    run_case(n, top1, seed++, "k 1");
    run_case(n, greedy, seed++, "T 0 (argmax)");
  }
  SampleParams bad = defaults;
  bad.top_k = 65;
  const std::string msg = error_of([&] { oscar::cuda::sample_rows(nullptr, 1, 10, bad, nullptr, nullptr); });
  report(msg.find("top_k 65") != std::string::npos, "sample_rows refuses top_k 65: " + msg);
}

}  // namespace oscar_cuda_test
