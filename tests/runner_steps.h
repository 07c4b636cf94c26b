// Steps of one sequence through any engine::Runner (CpuRunner, DeviceRunner), for tests
// that compare sequences logits row by logits row.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <vector>

#include "oscar/engine/runner.h"

namespace oscar::test {

// One step of one sequence; its logits row.
inline std::vector<float> step_logits(engine::Runner& r, SeqId s, std::span<const int32_t> tokens) {
  engine::Batch b;
  b.add(s, r.length(s), tokens, true);
  engine::StepOutput out;
  r.run(b, out);
  return std::vector<float>(out.logits.begin(), out.logits.begin() + r.n_vocab());
}

inline int32_t argmax_of(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

// n greedy steps of sequences a and b, both fed a's greedy ids: their logits rows must be
// equal bit for bit at every step. la: a's last logits row, updated.
inline void expect_lockstep(engine::Runner& r, SeqId a, SeqId b, std::vector<float>& la, int n) {
  for (int i = 0; i < n; ++i) {
    const int32_t next = argmax_of(la);
    la = step_logits(r, a, std::span<const int32_t>(&next, 1));
    ASSERT_EQ(la, step_logits(r, b, std::span<const int32_t>(&next, 1))) << "step " << i;
  }
}

}  // namespace oscar::test
