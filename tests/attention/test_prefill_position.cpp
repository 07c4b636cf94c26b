// prefill_position: the AVX2 kernel against the scalar reference, and the reference against
// the double-precision attention_ref, on fresh random inputs with history rows mixed in.
#include <gtest/gtest.h>

#include <cmath>

#include "../test_util.h"
#include "oscar/attention/attention.h"
#include "oscar/attention/prefill_position.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {
namespace {

// Tolerance: f32 sums of `visible` terms of magnitude ≤ 1: 1e-5 relative plus 2e-6·sqrt(n).
TEST(PrefillPosition, Avx2MatchesReferenceAndReferenceMatchesDouble) {
  uint64_t seed = 500;
  for (int d : {64, 128})
    for (int group : {1, 3, 6})
      for (int64_t visible : {1, 7, 54, 97, 300}) {
        const int64_t n_kv = visible + 5;
        const auto k = test::random_vector(size_t(n_kv * d), ++seed), v = test::random_vector(size_t(n_kv * d), ++seed);
        const auto kq = test::random_vector(size_t(n_kv * d), ++seed), vq = test::random_vector(size_t(n_kv * d), ++seed);
        const auto q = test::random_vector(size_t(group * d), ++seed, -2.0f, 2.0f);
        PrefillPositionArgs a;
        a.group = group, a.head_dim = d, a.scale = 1.0f / std::sqrt(float(d));
        a.k = k.data(), a.v = v.data(), a.kq = kq.data(), a.vq = vq.data();
        a.hb = std::min<int64_t>(4, visible), a.he = std::max(a.hb, visible - 3);
        std::vector<float> scores(size_t(group * visible)), ref(size_t(group * d)), fast(ref.size());
        prefill_position_ref(a, q.data(), visible, scores.data(), ref.data());
        // Double-precision check: the keys this position sees, laid out for attention_ref.
        std::vector<float> kk(size_t(visible * d)), vv(kk.size());
        for (int64_t t = 0; t < visible; ++t) {
          const bool hist = t >= a.hb && t < a.he;
          std::copy_n((hist ? kq : k).data() + t * d, d, kk.data() + t * d);
          std::copy_n((hist ? vq : v).data() + t * d, d, vv.data() + t * d);
        }
        std::vector<float> want(ref.size());
        const AttentionShape shape{group, 1, d};
        attention_ref(shape, q.data(), 1, visible - 1, kk.data(), vv.data(), visible, want.data());
        const double tol = 2e-6 * std::sqrt(double(visible));
        EXPECT_TRUE(test::all_close(ref, want, tol, 1e-5)) << "d " << d << " group " << group << " visible " << visible;
        if (!cpu_has_avx2()) continue;
        prefill_position_avx2(a, q.data(), visible, scores.data(), fast.data());
        EXPECT_TRUE(test::all_close(fast, ref, tol, 1e-5)) << "d " << d << " group " << group << " visible " << visible;
      }
}

}  // namespace
}  // namespace oscar
