// Partial attention results and their merge. A partial over some keys holds, per query
// head: the max logit m, the sum of exponentials l = Σ exp(s − m), and the unnormalized
// output o = Σ exp(s − m) v. Merging two partials is exact, so attention can be split
// over key ranges (threads, cache segments) and combined in any order.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>

namespace oscar {

struct SoftmaxPartial {
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
};

// Merges (m2, l2, o2) into (m1, l1, o1); o vectors have length d.
inline void softmax_merge(SoftmaxPartial& a, float* oa, const SoftmaxPartial& b, const float* ob, int d) {
  if (b.l == 0.0f) return;
  if (a.l == 0.0f) {
    a = b;
    std::copy(ob, ob + d, oa);
    return;
  }
  const float m = std::max(a.m, b.m);
  const float ca = std::exp(a.m - m), cb = std::exp(b.m - m);
  for (int i = 0; i < d; ++i) oa[i] = oa[i] * ca + ob[i] * cb;
  a.l = a.l * ca + b.l * cb;
  a.m = m;
}

}  // namespace oscar
