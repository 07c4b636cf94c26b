#include <gtest/gtest.h>

#include "oscar/kv/kv_spec.h"
#include "oscar/kv/window_rule.h"

namespace oscar {
namespace {

// h(t) by its definition, for every t around the sink and window edges: S while the
// history is empty, then t − W (T = 1), or whole groups of T rows (KIVI).
TEST(WindowRule, HistoryBoundaryByHand) {
  for (int64_t S : {0, 4, 64})
    for (int64_t W : {0, 1, 8, 256})
      for (int64_t T : {1, 32})
        for (int64_t t = 0; t <= S + W + 3 * T + 5; ++t) {
          const int64_t want = t <= S + W ? S : S + (t - S - W) / T * T;
          ASSERT_EQ(history_boundary(t, S, W, T), want) << "t " << t << " S " << S << " W " << W << " T " << T;
        }
  static_assert(history_boundary(100, 4, 8) == 92, "usable at compile time (and by nvcc)");
}

// The CPU cache's h(t) is the same rule, clamped to t inside the sink.
TEST(WindowRule, KvSpecHistoryEndIsTheRuleClampedToT) {
  for (const char* mode : {"int2-hadamard", "kivi2", "int4"}) {
    KvSpec s = KvSpec::parse(mode);
    s.sink = 4;
    s.recent = 16;
    for (int64_t t = 0; t < 200; ++t)
      ASSERT_EQ(s.history_end(t), std::min(t, history_boundary(t, s.sink, s.recent, s.demote_tokens()))) << mode << " t " << t;
  }
}

}  // namespace
}  // namespace oscar
