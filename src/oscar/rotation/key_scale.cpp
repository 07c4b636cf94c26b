#include "oscar/rotation/key_scale.h"

#include <algorithm>
#include <cmath>

#include "oscar/core/error.h"

namespace oscar {

KeyScaleFit key_scale_from_moments(std::span<const double> k_sq, std::span<const double> q_sq, int nkv, int d) {
  const size_t kvd = size_t(nkv) * size_t(d);
  if (k_sq.size() != kvd || q_sq.size() != kvd)
    fail("key scale: {} key and {} query moments for n_kv_heads·head_dim = {}", k_sq.size(), q_sq.size(), kvd);
  KeyScaleFit f;
  f.scale.assign(kvd, 1.0f);
  double gain = 0.0;
  for (int h = 0; h < nkv; ++h) {
    const size_t o = size_t(h) * size_t(d);
    double sq = 0.0, sk = 0.0, cross = 0.0, log_sum = 0.0;
    for (int c = 0; c < d; ++c) sq += q_sq[o + size_t(c)], sk += k_sq[o + size_t(c)];
    const double q_floor = 1e-6 * sq / d + 1e-30, k_floor = 1e-6 * sk / d + 1e-30;
    std::vector<double> s(static_cast<size_t>(d));
    for (int c = 0; c < d; ++c) {
      const double Q = std::max(q_sq[o + size_t(c)], q_floor), K = std::max(k_sq[o + size_t(c)], k_floor);
      cross += std::sqrt(Q * K);
      s[size_t(c)] = std::pow(K / Q, 0.25);
      log_sum += std::log(s[size_t(c)]);
    }
    gain += cross * cross / (sq * sk + 1e-300) / nkv;
    const double norm = std::exp(-log_sum / d);
    for (int c = 0; c < d; ++c) f.scale[o + size_t(c)] = float(s[size_t(c)] * norm);
  }
  f.predicted_gain = gain;
  return f;
}

std::vector<double> query_channel_moments(const CovarianceAccumulator& acc) {
  const int d = acc.head_dim;
  std::vector<double> q(size_t(acc.n_kv_heads) * size_t(d));
  for (int h = 0; h < acc.n_kv_heads; ++h) {
    const Eigen::MatrixXd c = acc.query_covariance(h);
    for (int i = 0; i < d; ++i) q[size_t(h) * size_t(d) + size_t(i)] = c(i, i);
  }
  return q;
}

Eigen::MatrixXd scaled_query_covariance(const CovarianceAccumulator& acc, std::span<const float> scale) {
  const int d = acc.head_dim, nkv = acc.n_kv_heads;
  if (int64_t(scale.size()) != int64_t(nkv) * d)
    fail("key scale: {} values for n_kv_heads·head_dim = {}", scale.size(), int64_t(nkv) * d);
  Eigen::MatrixXd sigma = Eigen::MatrixXd::Zero(d, d);
  for (int h = 0; h < nkv; ++h) {
    Eigen::VectorXd s(d);
    for (int i = 0; i < d; ++i) s(i) = double(scale[size_t(h) * size_t(d) + size_t(i)]);
    sigma += s.asDiagonal() * acc.query_covariance(h) * s.asDiagonal();
  }
  return sigma / double(nkv);
}

}  // namespace oscar
