// The fast Walsh–Hadamard transform against the explicit Sylvester matrix; the rotation-set
// checks and the run-time row rotation (AVX2 against the scalar reference).
#include <gtest/gtest.h>

#include <cmath>

#include "oscar/core/error.h"
#include "oscar/rotation/hadamard.h"
#include "oscar/rotation/rotation_set.h"
#include "oscar/ops/cpu_features.h"
#include "../test_util.h"

namespace oscar {
namespace {

// y = x·M for an explicit row-major M, in double.
std::vector<float> row_times(const std::vector<float>& x, const std::vector<float>& m, int d) {
  std::vector<float> y(static_cast<size_t>(d));
  for (int j = 0; j < d; ++j) {
    double s = 0.0;
    for (int i = 0; i < d; ++i) s += double(x[size_t(i)]) * m[size_t(i) * size_t(d) + size_t(j)];
    y[size_t(j)] = static_cast<float>(s);
  }
  return y;
}

TEST(Hadamard, TransformEqualsExplicitMatrix) {
  for (int d : {1, 2, 4, 8, 16, 64, 128, 256}) {
    const std::vector<float> h = hadamard_matrix(d);
    for (uint64_t seed = 0; seed < 5; ++seed) {
      const std::vector<float> x = test::random_vector(size_t(d), 100 * d + seed, -3.0f, 3.0f);
      const std::vector<float> want = row_times(x, h, d);
      std::vector<float> ref = x, avx = x, disp = x;
      hadamard_transform_ref(ref.data(), d);
      hadamard_transform(disp.data(), d);
      EXPECT_TRUE(test::all_close(ref, want, 1e-5, 1e-5)) << "ref d=" << d;
      EXPECT_TRUE(test::all_close(disp, want, 1e-5, 1e-5)) << "dispatch d=" << d;
      if (cpu_has_avx2()) {
        hadamard_transform_avx2(avx.data(), d);
        EXPECT_TRUE(test::all_close(avx, want, 1e-5, 1e-5)) << "avx2 d=" << d;
      }
      std::vector<double> xd(x.begin(), x.end());
      hadamard_transform(xd.data(), d);
      for (int i = 0; i < d; ++i) EXPECT_NEAR(xd[size_t(i)], want[size_t(i)], 1e-5) << "f64 d=" << d;
    }
  }
}

TEST(Hadamard, RowsVersionAndInvolution) {
  const int d = 64, n = 7;
  const std::vector<float> x = test::random_vector(size_t(d * n), 7);
  std::vector<float> y = x;
  hadamard_transform_rows(y.data(), n, d);
  for (int r = 0; r < n; ++r) {
    std::vector<float> row(x.begin() + r * d, x.begin() + (r + 1) * d);
    hadamard_transform_ref(row.data(), d);
    EXPECT_TRUE(test::all_close(y.data() + r * d, row.data(), size_t(d), 1e-6, 1e-6));
  }
  hadamard_transform_rows(y.data(), n, d);  // H·H = I
  EXPECT_TRUE(test::all_close(y, x, 1e-5, 1e-5));
}

TEST(Hadamard, MatrixIsSymmetricOrthogonalSylvester) {
  for (int d : {2, 4, 8, 64, 128, 256}) {
    const std::vector<float> h = hadamard_matrix(d);
    const std::vector<double> hd = hadamard_matrix_f64(d);
    double worst = 0.0;
    for (int i = 0; i < d; ++i) {
      for (int j = 0; j < d; ++j) {
        EXPECT_EQ(h[size_t(i * d + j)], h[size_t(j * d + i)]);
        double s = 0.0;
        for (int k = 0; k < d; ++k) s += double(h[size_t(i * d + k)]) * h[size_t(k * d + j)];
        worst = std::max(worst, std::abs(s - (i == j ? 1.0 : 0.0)));
        EXPECT_NEAR(hd[size_t(i * d + j)], h[size_t(i * d + j)], 1e-7);
      }
    }
    EXPECT_LT(worst, 1e-5) << "d=" << d;
    // Sylvester block structure: H_d = [[H', H'], [H', −H']] / √2.
    const int m = d / 2;
    const std::vector<float> hp = hadamard_matrix(m);
    const float s = 1.0f / std::sqrt(2.0f);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < m; ++j) {
        const float e = hp[size_t(i * m + j)] * s;
        EXPECT_NEAR(h[size_t(i * d + j)], e, 1e-7);
        EXPECT_NEAR(h[size_t(i * d + j + m)], e, 1e-7);
        EXPECT_NEAR(h[size_t((i + m) * d + j)], e, 1e-7);
        EXPECT_NEAR(h[size_t((i + m) * d + j + m)], -e, 1e-7);
      }
    }
  }
}

TEST(Hadamard, RefusesNonPowersOfTwo) {
  for (int d : {0, -4, 3, 6, 12, 96, 100}) {
    std::vector<float> x(16, 1.0f);
    try {
      hadamard_transform(x.data(), d);
      FAIL() << "d=" << d << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(d)), std::string::npos) << e.what();
    }
    EXPECT_THROW(hadamard_matrix(d), Error);
  }
}

TEST(RotateRow, AvxAndDispatchMatchReference) {
  for (int d : {4, 8, 24, 64, 96, 128, 256}) {
    const std::vector<float> R = test::random_vector(size_t(d * d), 11 + d);
    const std::vector<float> x = test::random_vector(size_t(d), 12 + d);
    std::vector<float> ref(static_cast<size_t>(d)), y(static_cast<size_t>(d));
    rotate_row_ref(R.data(), d, x.data(), ref.data());
    EXPECT_TRUE(test::all_close(ref, row_times(x, R, d), 1e-5, 1e-5)) << "d=" << d;
    rotate_row(R.data(), d, x.data(), y.data());
    EXPECT_TRUE(test::all_close(y, ref, 1e-5, 1e-5)) << "d=" << d;
    if (cpu_has_avx2()) {
      rotate_row_avx2(R.data(), d, x.data(), y.data());
      EXPECT_TRUE(test::all_close(y, ref, 1e-5, 1e-5)) << "d=" << d;
    }
    const int n = 5;
    const std::vector<float> xs = test::random_vector(size_t(n * d), 13 + d);
    std::vector<float> ys(static_cast<size_t>(n * d));
    rotate_rows(R.data(), d, xs.data(), ys.data(), n);
    for (int r = 0; r < n; ++r) {
      rotate_row_ref(R.data(), d, xs.data() + r * d, ref.data());
      EXPECT_TRUE(test::all_close(ys.data() + r * d, ref.data(), size_t(d), 1e-5, 1e-5));
    }
  }
}

TEST(RotateRow, HadamardRotationKeepsDotProducts) {
  const int d = 128;
  const std::vector<float> H = hadamard_matrix(d);
  const std::vector<float> q = test::random_vector(d, 1), k = test::random_vector(d, 2);
  std::vector<float> qr(static_cast<size_t>(d)), kr(static_cast<size_t>(d));
  rotate_row(H.data(), d, q.data(), qr.data());
  rotate_row(H.data(), d, k.data(), kr.data());
  double a = 0.0, b = 0.0;
  for (int i = 0; i < d; ++i) {
    a += double(q[size_t(i)]) * k[size_t(i)];
    b += double(qr[size_t(i)]) * kr[size_t(i)];
  }
  EXPECT_NEAR(a, b, 1e-4);
}

RotationSet valid_set(int d, int n_layers) {
  RotationSet s;
  s.head_dim = d;
  s.group_size = std::min(d, 128);
  for (int l = 0; l < n_layers; ++l) {
    LayerRotation r;
    r.layer = l;
    r.k_rotation = hadamard_matrix(d);
    r.v_rotation = l % 2 ? std::vector<float>{} : hadamard_matrix(d);
    r.k_eigenvalues.assign(size_t(d), 1.0f);
    r.k_clip = 0.96f;
    r.v_clip = 0.92f;
    s.layers.push_back(r);
  }
  return s;
}

void expect_invalid(const RotationSet& s, const std::string& needle) {
  try {
    s.validate();
    FAIL() << "accepted; expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(RotationSetValidate, AcceptsConsistentSets) {
  EXPECT_NO_THROW(valid_set(64, 3).validate());
  EXPECT_NO_THROW(valid_set(128, 2).validate());
  RotationSet s = valid_set(256, 1);
  s.group_size = 128;
  EXPECT_NO_THROW(s.validate());
  s.group_size = 32;
  EXPECT_NO_THROW(s.validate());
  EXPECT_NO_THROW(valid_set(4, 1).validate());
}

TEST(RotationSetValidate, RefusesInconsistentSets) {
  RotationSet s = valid_set(64, 3);
  s.head_dim = 96;
  expect_invalid(s, "head_dim 96");
  s = valid_set(2, 1);
  expect_invalid(s, "head_dim 2");
  s = valid_set(64, 3);
  s.group_size = 128;
  expect_invalid(s, "group_size 128");
  s.group_size = 48;
  expect_invalid(s, "group_size 48");
  s = valid_set(64, 3);
  s.layers[1].layer = 5;
  expect_invalid(s, "layers[1]");
  s = valid_set(64, 3);
  s.layers[2].k_rotation.resize(64 * 63);
  expect_invalid(s, "layer 2 k_rotation");
  s = valid_set(64, 3);
  s.layers[0].v_rotation[5] += 0.5f;
  expect_invalid(s, "layer 0 v_rotation is not orthogonal");
  s = valid_set(64, 3);
  for (float& x : s.layers[0].k_rotation) x *= 1.01f;
  expect_invalid(s, "not orthogonal");
  s = valid_set(64, 3);
  s.layers[1].k_rotation[3] = NAN;
  expect_invalid(s, "not finite");
  s = valid_set(64, 3);
  s.layers[1].k_eigenvalues.resize(10);
  expect_invalid(s, "k_eigenvalues");
  s = valid_set(64, 3);
  s.layers[2].v_clip = 1.5f;
  expect_invalid(s, "v_clip");
  s.layers[2].v_clip = NAN;
  expect_invalid(s, "v_clip");
  s = valid_set(64, 3);
  s.source_grouping = "head";
  expect_invalid(s, "source_grouping");
  s = valid_set(64, 3);
  s.recent_tokens = -1;
  expect_invalid(s, "recent_tokens");
}

TEST(RotationSetValidate, ProbeAcceptsRowPermutationRejectsDuplicatedRow) {
  // A permutation of rows is orthogonal; the probe must not reject it.
  RotationSet s = valid_set(64, 1);
  auto& R = s.layers[0].k_rotation;
  for (int j = 0; j < 64; ++j) std::swap(R[size_t(j)], R[size_t(64 + j)]);
  EXPECT_NO_THROW(s.validate());
  // Two rows made equal: unit norms stay, orthogonality breaks; the probes see it.
  for (int j = 0; j < 64; ++j) R[size_t(64 + j)] = R[size_t(j)];
  expect_invalid(s, "not orthogonal");
}

}  // namespace
}  // namespace oscar
