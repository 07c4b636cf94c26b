#include "oscar/eval/kv_stats.h"

#include <algorithm>
#include <cmath>

#include "oscar/core/error.h"
#include "oscar/rotation/rotation_set.h"

namespace oscar {

RowStats row_stats(const float* rows, int64_t n, int64_t stride, int d, std::span<const float> bias, const float* R) {
  OSCAR_CHECK(n > 0 && d > 0, "row_stats: empty input");
  OSCAR_CHECK(bias.empty() || int(bias.size()) == d, "row_stats: bias has {} values for d {}", bias.size(), d);
  RowStats s;
  std::vector<double> ch2(static_cast<size_t>(d), 0.0);
  std::vector<float> y(static_cast<size_t>(d));
  double sum2 = 0.0, ratio = 0.0;
  for (int64_t t = 0; t < n; ++t) {
    const float* x = rows + t * stride;
    if (R) {
      rotate_row_ref(R, d, x, y.data());
      x = y.data();
    }
    double r2 = 0.0, mx = 0.0;
    for (int i = 0; i < d; ++i) {
      const double v = x[i];
      r2 += v * v;
      ch2[size_t(i)] += v * v;
      mx = std::max(mx, std::abs(v));
    }
    sum2 += r2;
    if (r2 > 0) ratio += mx / std::sqrt(r2 / d);
  }
  s.rms = std::sqrt(sum2 / (double(n) * d));
  s.max_over_rms = ratio / double(n);
  std::vector<double> sorted = ch2;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[size_t(d / 2)];
  s.channel_outlier = median > 0 ? std::sqrt(sorted.back() / median) : 0.0;
  if (!bias.empty() && sum2 > 0) {
    double b2 = 0.0;
    for (float b : bias) b2 += double(b) * b;
    s.bias_share = b2 / (sum2 / double(n));  // RoPE and rotations keep ‖b‖
  }
  return s;
}

}  // namespace oscar
