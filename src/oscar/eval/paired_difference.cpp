#include "oscar/eval/paired_difference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "oscar/core/error.h"

namespace oscar {

bool PairedDifference::significant(double z) const { return std::abs(mean) > z * standard_error; }

PairedDifference paired_difference(std::span<const double> a, std::span<const double> b, int64_t block) {
  if (a.size() != b.size() || a.empty() || block < 1)
    fail("paired difference: {} and {} values in blocks of {}", a.size(), b.size(), block);
  const int64_t n = int64_t(a.size());
  const int64_t nb = std::max<int64_t>(1, n / block);
  std::vector<double> means(size_t(nb), 0.0);
  double total = 0.0;
  for (int64_t k = 0; k < nb; ++k) {  // block k covers [k·n/nb, (k+1)·n/nb)
    const int64_t lo = k * n / nb, hi = (k + 1) * n / nb;
    double s = 0.0;
    for (int64_t i = lo; i < hi; ++i) s += a[size_t(i)] - b[size_t(i)];
    total += s;
    means[size_t(k)] = s / double(hi - lo);
  }
  PairedDifference d;
  d.mean = total / double(n);
  d.blocks = nb;
  if (nb < 2) {
    d.standard_error = std::numeric_limits<double>::infinity();
    return d;
  }
  double bm = 0.0;
  for (double m : means) bm += m;
  bm /= double(nb);
  double ss = 0.0;
  for (double m : means) ss += (m - bm) * (m - bm);
  d.standard_error = std::sqrt(ss / double(nb - 1) / double(nb));
  return d;
}

}  // namespace oscar
