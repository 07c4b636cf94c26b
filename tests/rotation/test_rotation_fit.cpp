// The calibration math: bit-reversal permutation, eigendecomposition, every rotation
// composition (orthogonality, what each one does to Σ), and the streaming covariance
// accumulators against naive O(n·d²) loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "../test_util.h"
#include "oscar/rotation/rotation_fit.h"
#include "oscar/core/error.h"
#include "oscar/rotation/hadamard.h"
#include "oscar/rotation/rotation_set.h"

namespace oscar {
namespace {

// A random SPD matrix with a wide spectrum (eigenvalues from 1e-3 to ~1e2), like real K/Q.
Eigen::MatrixXd random_spd(int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  Eigen::MatrixXd a(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) a(i, j) = n(rng);
  const Eigen::HouseholderQR<Eigen::MatrixXd> qr(a);
  const Eigen::MatrixXd q = qr.householderQ();
  Eigen::VectorXd lam(d);
  for (int i = 0; i < d; ++i) lam[i] = 1e-3 + 100.0 * std::pow(double(i + 1) / d, 4.0) * (1.0 + 0.1 * n(rng) * n(rng));
  return q * lam.asDiagonal() * q.transpose();
}

double max_abs(const Eigen::MatrixXd& m) { return m.cwiseAbs().maxCoeff(); }

Eigen::MatrixXd from_float(const std::vector<float>& r, int d) {
  Eigen::MatrixXd m(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) m(i, j) = r[size_t(i) * size_t(d) + size_t(j)];
  return m;
}

// ---- permutation ---------------------------------------------------------------------------

TEST(BitReversal, BitReverse) {
  EXPECT_EQ(bit_reverse(0, 3), 0);
  EXPECT_EQ(bit_reverse(1, 3), 4);
  EXPECT_EQ(bit_reverse(3, 3), 6);
  EXPECT_EQ(bit_reverse(6, 3), 3);
  EXPECT_EQ(bit_reverse(1, 7), 64);
  EXPECT_EQ(bit_reverse(0b0000011, 7), 0b1100000);
}

TEST(BitReversal, HandCheckedD8) {
  // index:      0    1  2  3  4  5    6  7
  Eigen::VectorXd e(8);
  e << 0.5, 3, 1, 7, 2, 0.1, 5, 4;
  // descending: s = [3, 6, 7, 1, 4, 2, 0, 5]; br over 3 bits: 0→0 1→4 2→2 3→6 4→1 5→5 6→3 7→7
  // perm[br(i)] = s[i]: perm[0]=3 perm[4]=6 perm[2]=7 perm[6]=1 perm[1]=4 perm[5]=2 perm[3]=0 perm[7]=5
  const std::vector<int> want = {3, 4, 7, 0, 6, 2, 1, 5};
  EXPECT_EQ(bit_reversal_permutation(e), want);
  // P_br = I[:, perm]: (x·P)[j] = x[perm[j]], so the first half (one group of 4) holds the
  // eigen-directions of rank 1, 5, 3, 7 and the second half those of rank 2, 6, 4, 8.
  const Eigen::MatrixXd P = permutation_matrix(want);
  Eigen::RowVectorXd x(8);
  x << 10, 11, 12, 13, 14, 15, 16, 17;
  const Eigen::RowVectorXd y = x * P;
  for (int j = 0; j < 8; ++j) EXPECT_EQ(y[j], x[want[size_t(j)]]);
  // Eigen's ascending eigenvalues: s = d−1, d−2, …; perm[j] = d−1−br(j).
  Eigen::VectorXd asc(8);
  asc << 1, 2, 3, 4, 5, 6, 7, 8;
  EXPECT_EQ(bit_reversal_permutation(asc), (std::vector<int>{7, 3, 5, 1, 6, 2, 4, 0}));
  // ties: lower index first
  EXPECT_EQ(bit_reversal_permutation(Eigen::VectorXd::Ones(4)), (std::vector<int>{0, 2, 1, 3}));
}

TEST(BitReversal, IsAPermutationAndRefusesOtherSizes) {
  for (int d : {1, 2, 64, 128, 256}) {
    const Eigen::VectorXd e = Eigen::VectorXd::Random(d);
    std::vector<int> p = bit_reversal_permutation(e);
    // the largest eigenvalue lands at position 0, the second largest at d/2
    if (d >= 2) {
      Eigen::Index imax;
      e.maxCoeff(&imax);
      EXPECT_EQ(p[0], imax);
    }
    std::sort(p.begin(), p.end());
    for (int i = 0; i < d; ++i) EXPECT_EQ(p[size_t(i)], i);
  }
  EXPECT_THROW(bit_reversal_permutation(Eigen::VectorXd::Ones(96)), Error);
}

// ---- eigendecomposition and compositions ----------------------------------------------------

TEST(SymmetricEigen, AscendingAndReconstructs) {
  const Eigen::MatrixXd s = random_spd(64, 1);
  Eigen::MatrixXd asym = s;
  asym(0, 1) += 1e-9;  // symmetrized first
  const SymmetricEigen e = symmetric_eigen(asym);
  for (int i = 1; i < 64; ++i) EXPECT_LE(e.eigenvalues[i - 1], e.eigenvalues[i]);
  const Eigen::MatrixXd back = e.eigenvectors * e.eigenvalues.asDiagonal() * e.eigenvectors.transpose();
  EXPECT_LT(max_abs(back - s), 1e-10 * max_abs(s));
  EXPECT_THROW(symmetric_eigen(Eigen::MatrixXd::Zero(3, 4)), Error);
  Eigen::MatrixXd bad = s;
  bad(2, 2) = NAN;
  EXPECT_THROW(symmetric_eigen(bad), Error);
}

TEST(RotationFit, EveryCompositionIsOrthogonal) {
  for (int d : {64, 128, 256}) {
    const Eigen::MatrixXd s = random_spd(d, 10 + d);
    for (const std::string& c : rotation_compositions()) {
      const FittedRotation f = fit_rotation(s, c);
      ASSERT_EQ(f.rotation.size(), size_t(d) * size_t(d));
      ASSERT_EQ(f.eigenvalues.size(), size_t(d));
      const Eigen::MatrixXd r = from_float(f.rotation, d);
      const double err = max_abs(r.transpose() * r - Eigen::MatrixXd::Identity(d, d));
      EXPECT_LT(err, 1e-5) << c << " d=" << d;
      EXPECT_LT(max_abs(f.rotation_f64 - r), 1e-6) << c;
      // the float32 matrix passes the run-time check too
      RotationSet set;
      set.head_dim = d;
      set.group_size = 64;
      set.layers.push_back({0, f.rotation, f.rotation, f.eigenvalues, f.eigenvalues, 0.96f, 0.92f, {}, {}});
      EXPECT_NO_THROW(set.validate()) << c;
    }
  }
}

TEST(RotationFit, DotProductsAreInvariant) {
  const int d = 128;
  const Eigen::MatrixXd s = random_spd(d, 3);
  for (const std::string& c : rotation_compositions()) {
    const FittedRotation f = fit_rotation(s, c);
    for (uint64_t seed = 0; seed < 4; ++seed) {
      const std::vector<float> q = test::random_vector(d, 50 + seed), k = test::random_vector(d, 60 + seed);
      std::vector<float> qr(static_cast<size_t>(d)), kr(static_cast<size_t>(d));
      rotate_row(f.rotation.data(), d, q.data(), qr.data());
      rotate_row(f.rotation.data(), d, k.data(), kr.data());
      double a = 0.0, b = 0.0;
      for (int i = 0; i < d; ++i) {
        a += double(q[size_t(i)]) * k[size_t(i)];
        b += double(qr[size_t(i)]) * kr[size_t(i)];
      }
      EXPECT_NEAR(a, b, 1e-4) << c;
    }
  }
}

TEST(RotationFit, WhatEachCompositionDoesToSigma) {
  for (int d : {64, 128, 256}) {
    const Eigen::MatrixXd s = random_spd(d, 20 + d);
    const double scale = max_abs(s);
    const SymmetricEigen e = symmetric_eigen(s);
    const std::vector<int> perm = bit_reversal_permutation(e.eigenvalues);
    auto rsr = [&](const std::string& c) {
      const Eigen::MatrixXd r = rotation_matrix(s, c);
      return Eigen::MatrixXd(r.transpose() * s * r);
    };
    // plain: RᵀΣR = Λ (diagonal, ascending)
    const Eigen::MatrixXd lam = rsr("plain");
    EXPECT_LT(max_abs(lam - Eigen::MatrixXd(lam.diagonal().asDiagonal())), 1e-8 * scale) << d;
    for (int i = 0; i < d; ++i) EXPECT_NEAR(lam(i, i), e.eigenvalues[i], 1e-8 * scale);
    // r_h and r_h_pbr: every coordinate has the same variance, trace/d
    const double mean = s.trace() / d;
    for (const char* c : {"r_h", "r_h_pbr"}) {
      const Eigen::VectorXd diag = rsr(c).diagonal();
      EXPECT_LT((diag.array() - mean).abs().maxCoeff(), 1e-8 * scale) << c << " d=" << d;
    }
    // br: coordinate j carries eigenvalue λ[perm[j]], diagonal; position 0 the largest
    const Eigen::MatrixXd b = rsr("br");
    for (int j = 0; j < d; ++j) EXPECT_NEAR(b(j, j), e.eigenvalues[perm[size_t(j)]], 1e-8 * scale);
    EXPECT_NEAR(b(0, 0), e.eigenvalues[d - 1], 1e-8 * scale);
    EXPECT_NEAR(b(d / 2, d / 2), e.eigenvalues[d - 2], 1e-8 * scale);
    EXPECT_LT(max_abs(b - Eigen::MatrixXd(b.diagonal().asDiagonal())), 1e-8 * scale);
    // compositions are the named products
    const Eigen::MatrixXd U = e.eigenvectors, P = permutation_matrix(perm);
    const Eigen::MatrixXd H = Eigen::Map<const Eigen::MatrixXd>(hadamard_matrix_f64(d).data(), d, d);
    EXPECT_LT(max_abs(rotation_matrix(s, "r_h_pbr") - rotation_matrix(s, "r_h") * P), 1e-12);
    EXPECT_LT(max_abs(rotation_matrix(s, "h_r_pbr") - H * U * P), 1e-12);
    EXPECT_LT(max_abs(rotation_matrix(s, "h_pbr_r") - H * P * U), 1e-12);
    EXPECT_LT(max_abs(rotation_matrix(s, "h_pbr") - H * P), 1e-12);
    EXPECT_EQ(rotation_matrix(s, "pbr"), P);
    EXPECT_LT(max_abs(rotation_matrix(s, "hadamard") - H), 1e-15);
    EXPECT_EQ(rotation_matrix(s, "identity"), Eigen::MatrixXd::Identity(d, d));
    // br_h128: U·P·H for d ≤ 128; for d = 256 the Hadamard stays inside each 128-block
    const Eigen::MatrixXd bh = rotation_matrix(s, "br_h128");
    if (d <= 128) {
      EXPECT_LT(max_abs(bh - U * P * H), 1e-12);
    } else {
      const Eigen::MatrixXd h128 = Eigen::Map<const Eigen::MatrixXd>(hadamard_matrix_f64(128).data(), 128, 128);
      Eigen::MatrixXd blk = Eigen::MatrixXd::Zero(d, d);
      blk.topLeftCorner(128, 128) = h128;
      blk.bottomRightCorner(128, 128) = h128;
      EXPECT_LT(max_abs(bh - U * P * blk), 1e-12);
    }
  }
}

TEST(RotationFit, EigenvaluesAndNames) {
  const Eigen::MatrixXd s = random_spd(64, 5);
  const SymmetricEigen e = symmetric_eigen(s);
  const FittedRotation f = fit_rotation(s, "qqt_r_h_pbr");  // full objective names work too
  for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(f.eigenvalues[size_t(i)], float(e.eigenvalues[i]));
  for (float x : fit_rotation(s, "hadamard").eigenvalues) EXPECT_EQ(x, 1.0f);
  EXPECT_EQ(split_objective("sst_r_h_pbr"), (std::pair<std::string, std::string>{"sst", "r_h_pbr"}));
  EXPECT_EQ(split_objective("ktk_plain"), (std::pair<std::string, std::string>{"ktk", "plain"}));
  EXPECT_EQ(split_objective("br_h128"), (std::pair<std::string, std::string>{"", "br_h128"}));
  EXPECT_THROW(split_objective("qqt_rh"), Error);
  EXPECT_THROW(split_objective("xyz_r_h"), Error);
  try {
    fit_rotation(random_spd(96, 1), "r_h_pbr");
    FAIL() << "d = 96 accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("96"), std::string::npos) << err.what();
  }
  EXPECT_THROW(fit_rotation(Eigen::MatrixXd::Zero(4, 8), "plain"), Error);
}

// ---- covariance accumulation ----------------------------------------------------------------

struct Acts {
  int n_tokens, n_heads, n_kv, d;
  std::vector<float> q, k, v;  // [n, n_heads, d], [n, n_kv, d], [n, n_kv, d]
};

Acts random_acts(int n_tokens, int n_heads, int n_kv, int d, uint64_t seed) {
  Acts a{n_tokens, n_heads, n_kv, d, {}, {}, {}};
  a.q = test::random_vector(size_t(n_tokens) * n_heads * d, seed, -2.0f, 2.0f);
  a.k = test::random_vector(size_t(n_tokens) * n_kv * d, seed + 1, -1.0f, 3.0f);  // non-zero mean
  a.v = test::random_vector(size_t(n_tokens) * n_kv * d, seed + 2, -1.5f, 1.0f);
  return a;
}

// Naive per-KV-head sums, straight from the spec's formulas.
struct Naive {
  std::vector<Eigen::MatrixXd> cq, kk, vv, sst;  // per KV head, normalized
};

Naive naive(const Acts& a) {
  const int d = a.d, r = a.n_heads / a.n_kv;
  Naive n;
  for (int h = 0; h < a.n_kv; ++h) {
    Eigen::MatrixXd cq = Eigen::MatrixXd::Zero(d, d), kk = cq, vv = cq, wvv = cq;
    for (int t = 0; t < a.n_tokens; ++t) {
      for (int g = h * r; g < (h + 1) * r; ++g) {
        const float* q = a.q.data() + (size_t(t) * a.n_heads + g) * d;
        for (int i = 0; i < d; ++i)
          for (int j = 0; j < d; ++j) cq(i, j) += double(q[i]) * q[j];
      }
      const float* k = a.k.data() + (size_t(t) * a.n_kv + h) * d;
      const float* v = a.v.data() + (size_t(t) * a.n_kv + h) * d;
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) {
          kk(i, j) += double(k[i]) * k[j];
          vv(i, j) += double(v[i]) * v[j];
        }
    }
    cq /= double(a.n_tokens) * r;
    double wsum = 0.0;
    for (int t = 0; t < a.n_tokens; ++t) {
      const float* k = a.k.data() + (size_t(t) * a.n_kv + h) * d;
      const float* v = a.v.data() + (size_t(t) * a.n_kv + h) * d;
      double w = 0.0;
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) w += double(k[i]) * cq(i, j) * k[j];
      wsum += w;
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) wvv(i, j) += w * v[i] * v[j];
    }
    n.cq.push_back(cq);
    n.kk.push_back(kk / a.n_tokens);
    n.vv.push_back(vv / a.n_tokens);
    n.sst.push_back(wvv / wsum);
  }
  return n;
}

Eigen::MatrixXd mean_of(const std::vector<Eigen::MatrixXd>& m) {
  Eigen::MatrixXd s = Eigen::MatrixXd::Zero(m[0].rows(), m[0].cols());
  for (const auto& x : m) s += x;
  return s / double(m.size());
}

double rel_diff(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b) { return max_abs(a - b) / max_abs(b); }

// Feeds the activations in chunks of the given sizes (cycled), both passes.
CovarianceAccumulator accumulate(const Acts& a, const std::vector<int>& chunks) {
  CovarianceAccumulator acc(a.n_heads, a.n_kv, a.d);
  for (int pass = 1; pass <= 2; ++pass) {
    size_t ci = 0;
    for (int t = 0; t < a.n_tokens;) {
      const int n = std::min(chunks[ci++ % chunks.size()], a.n_tokens - t);
      const float* q = a.q.data() + size_t(t) * a.n_heads * a.d;
      const float* k = a.k.data() + size_t(t) * a.n_kv * a.d;
      const float* v = a.v.data() + size_t(t) * a.n_kv * a.d;
      if (pass == 1) {
        acc.add_pass1(q, k, v, n);
      } else {
        acc.add_pass2(k, v, n);
      }
      t += n;
    }
    if (pass == 1) acc.freeze_query_covariance();
  }
  return acc;
}

TEST(PoolCovariances, UnitTraceAndBlindToEachSourcesScale) {
  // --pool equal: scaling one source's activations (its Σ by c²) leaves the pool as it was,
  // the pool has unit trace and equals the hand-written weighted mean of the normalized Σ_i.
  const Eigen::MatrixXd a = random_spd(16, 3), b = random_spd(16, 4), c = random_spd(16, 5);
  const std::vector<double> w = {1.0, 2.0, 0.5};
  const Eigen::MatrixXd p = pool_covariances({a, b, c}, w);
  EXPECT_NEAR(p.trace(), 1.0, 1e-12);
  const Eigen::MatrixXd want = (1.0 * a / a.trace() + 2.0 * b / b.trace() + 0.5 * c / c.trace()) / 3.5;
  EXPECT_LT(max_abs(p - want), 1e-14);
  EXPECT_LT(max_abs(pool_covariances({a, 9.0 * b, c}, w) - p), 1e-14);
  // Unlike a plain sum, which the larger source steers.
  EXPECT_GT(max_abs((a + 9.0 * b) / (a + 9.0 * b).trace() - (a + b) / (a + b).trace()), 1e-3);
  EXPECT_LT(max_abs(pool_covariances({a}, {1.0}) - a / a.trace()), 1e-14);
  EXPECT_THROW(pool_covariances({}, {}), Error);
  EXPECT_THROW(pool_covariances({a, b}, {1.0}), Error);
  EXPECT_THROW(pool_covariances({a, random_spd(8, 6)}, {1.0, 1.0}), Error);
  EXPECT_THROW(pool_covariances({a, b}, {1.0, 0.0}), Error);
  EXPECT_THROW(pool_covariances({a, Eigen::MatrixXd::Zero(16, 16)}, {1.0, 1.0}), Error);
}

TEST(CovarianceAccumulator, MatchesNaiveLoopsAndStreamingMatchesOneShot) {
  for (auto [n_heads, n_kv, d, n_tok] : {std::tuple{6, 2, 16, 601}, std::tuple{9, 3, 64, 300}, std::tuple{4, 4, 8, 97}}) {
    const Acts a = random_acts(n_tok, n_heads, n_kv, d, 1000 + d);
    const Naive n = naive(a);
    const CovarianceAccumulator once = accumulate(a, {n_tok});
    const CovarianceAccumulator streamed = accumulate(a, {1, 54, 97, 300, 7});
    EXPECT_EQ(streamed.q_tokens, n_tok);
    EXPECT_EQ(streamed.sst_tokens, n_tok);
    for (const char* obj : {"qqt", "ktk", "vtv", "sst"}) {
      EXPECT_LT(rel_diff(streamed.objective(obj), once.objective(obj)), 1e-10) << obj << " d=" << d;
      const Eigen::MatrixXd m = once.objective(obj);
      EXPECT_EQ(m, m.transpose()) << obj;
    }
    EXPECT_LT(rel_diff(once.objective("qqt"), mean_of(n.cq)), 1e-10);
    EXPECT_LT(rel_diff(once.objective("ktk"), mean_of(n.kk)), 1e-10);
    EXPECT_LT(rel_diff(once.objective("vtv"), mean_of(n.vv)), 1e-10);
    EXPECT_LT(rel_diff(once.objective("sst"), mean_of(n.sst)), 1e-10);
    for (int h = 0; h < n_kv; ++h) {
      EXPECT_LT(rel_diff(once.query_covariance(h), n.cq[size_t(h)]), 1e-10) << h;
      EXPECT_LT(rel_diff(once.objective("sst", h), n.sst[size_t(h)]), 1e-10) << h;
      EXPECT_LT(rel_diff(once.objective("ktk", h), n.kk[size_t(h)]), 1e-10) << h;
    }
  }
}

TEST(CovarianceAccumulator, QueryHeadsGroupContiguously) {
  // n_heads 6, n_kv 2: query heads 0,1,2 → KV head 0 and 3,4,5 → KV head 1. Head g has a
  // single non-zero coordinate (g) of value g+1, so C_Q,0 = diag(1, 4, 9, 0, …)/3 and
  // C_Q,1 = diag(0, 0, 0, 16, 25, 36, 0, 0)/3; an interleaved mapping would mix them.
  const int n_heads = 6, n_kv = 2, d = 8, n_tok = 5;
  std::vector<float> q(size_t(n_tok) * n_heads * d, 0.0f);
  for (int t = 0; t < n_tok; ++t)
    for (int g = 0; g < n_heads; ++g) q[(size_t(t) * n_heads + g) * d + g] = float(g + 1);
  CovarianceAccumulator acc(n_heads, n_kv, d);
  acc.add_pass1(q.data(), nullptr, nullptr, n_tok);
  for (int h = 0; h < n_kv; ++h) {
    Eigen::MatrixXd want = Eigen::MatrixXd::Zero(d, d);
    for (int g = 3 * h; g < 3 * h + 3; ++g) want(g, g) = double((g + 1) * (g + 1)) / 3.0;
    EXPECT_LT(max_abs(acc.query_covariance(h) - want), 1e-12) << h;
  }
  EXPECT_THROW(acc.objective("ktk"), Error);  // k was not given
}

TEST(CovarianceAccumulator, SstWeightsAreQueryScores) {
  // One KV head, d = 2, C_Q = diag(4, 1): w(k = (1, 0)) = 4, w(k = (0, 1)) = 1. With values
  // e1 and e2 for those tokens Σ_V = diag(4, 1) / 5.
  CovarianceAccumulator acc(1, 1, 2);
  const std::vector<float> q = {2, 0, 0, 1};  // C_Q = (diag(4,0) + diag(0,1)) / 2
  acc.add_pass1(q.data(), nullptr, nullptr, 2);
  acc.freeze_query_covariance();
  const std::vector<float> k = {1, 0, 0, 1}, v = {1, 0, 0, 1};
  acc.add_pass2(k.data(), v.data(), 2);
  EXPECT_NEAR(acc.w_sum[0], 2.0 + 0.5, 1e-15);
  Eigen::MatrixXd want(2, 2);
  want << 2.0 / 2.5, 0, 0, 0.5 / 2.5;
  EXPECT_LT(max_abs(acc.objective("sst") - want), 1e-15);
}

TEST(CovarianceAccumulator, MergeOfShardsEqualsOnePass) {
  const Acts a = random_acts(400, 6, 2, 16, 77);
  const CovarianceAccumulator whole = accumulate(a, {400});
  const int split = 123, d = a.d;
  CovarianceAccumulator s1(6, 2, d), s2(6, 2, d);
  s1.add_pass1(a.q.data(), a.k.data(), a.v.data(), split);
  s2.add_pass1(a.q.data() + size_t(split) * 6 * d, a.k.data() + size_t(split) * 2 * d,
               a.v.data() + size_t(split) * 2 * d, 400 - split);
  s1.merge(s2);
  s1.freeze_query_covariance();
  CovarianceAccumulator p2 = s1;  // a copy per pass-2 shard
  s1.add_pass2(a.k.data(), a.v.data(), split);
  p2.add_pass2(a.k.data() + size_t(split) * 2 * d, a.v.data() + size_t(split) * 2 * d, 400 - split);
  s1.merge(p2);
  for (const char* obj : {"qqt", "ktk", "vtv", "sst"})
    EXPECT_LT(rel_diff(s1.objective(obj), whole.objective(obj)), 1e-10) << obj;
  EXPECT_THROW(s1.merge(CovarianceAccumulator(6, 3, d)), Error);
  EXPECT_THROW(s1.merge(CovarianceAccumulator(6, 2, d)), Error);  // frozen vs not
}

TEST(CovarianceAccumulator, RefusesMisuse) {
  EXPECT_THROW(CovarianceAccumulator(6, 4, 64), Error);
  EXPECT_THROW(CovarianceAccumulator(6, 0, 64), Error);
  CovarianceAccumulator acc(2, 1, 4);
  const std::vector<float> x(8, 1.0f);
  EXPECT_THROW(acc.add_pass2(x.data(), x.data(), 1), Error);   // before the freeze
  EXPECT_THROW(acc.freeze_query_covariance(), Error);          // no queries yet
  acc.add_pass1(x.data(), x.data(), x.data(), 1);
  EXPECT_THROW(acc.objective("sst"), Error);  // no pass 2
  EXPECT_THROW(acc.objective("kqt"), Error);
  EXPECT_THROW(acc.objective("qqt", 1), Error);
  acc.freeze_query_covariance();
  EXPECT_THROW(acc.add_pass1(x.data(), x.data(), x.data(), 1), Error);
  EXPECT_THROW(acc.add_pass2(x.data(), nullptr, 1), Error);
}

TEST(CovarianceAccumulator, FitFromAccumulatedObjective) {
  // End to end on synthetic data: each objective feeds its composition and gives an
  // orthogonal rotation; r_h_pbr equalizes the per-coordinate variance of its objective.
  const Acts a = random_acts(500, 6, 2, 64, 9);
  const CovarianceAccumulator acc = accumulate(a, {128});
  for (const char* obj : {"qqt_r_h_pbr", "sst_r_h_pbr", "ktk_plain", "vtv_br"}) {
    const std::string src = split_objective(obj).first;
    const Eigen::MatrixXd s = acc.objective(src);
    const FittedRotation f = fit_rotation(s, obj);
    const Eigen::MatrixXd r = from_float(f.rotation, 64);
    EXPECT_LT(max_abs(r.transpose() * r - Eigen::MatrixXd::Identity(64, 64)), 1e-5) << obj;
    if (split_objective(obj).second == "r_h_pbr") {
      const Eigen::VectorXd diag = (f.rotation_f64.transpose() * s * f.rotation_f64).diagonal();
      EXPECT_LT((diag.array() - s.trace() / 64).abs().maxCoeff(), 1e-8 * max_abs(s)) << obj;
    }
  }
}

}  // namespace
}  // namespace oscar
