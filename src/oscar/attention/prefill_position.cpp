// Scalar reference of prefill_position.h: dot products, a stable softmax, then the
// weighted sum of values, each in position order.
#include "oscar/attention/prefill_position.h"

#include <algorithm>
#include <cmath>

namespace oscar {

void prefill_position_ref(const PrefillPositionArgs& a, const float* q, int64_t visible, float* scores, float* out) {
  const int d = a.head_dim;
  auto key = [&](int64_t t) { return (t >= a.hb && t < a.he ? a.kq : a.k) + t * d; };
  auto value = [&](int64_t t) { return (t >= a.hb && t < a.he ? a.vq : a.v) + t * d; };
  for (int g = 0; g < a.group; ++g) {
    const float* qg = q + g * d;
    float* s = scores + g * visible;
    for (int64_t t = 0; t < visible; ++t) {
      const float* kt = key(t);
      float acc = 0.0f;
      for (int c = 0; c < d; ++c) acc += qg[c] * kt[c];
      s[t] = acc * a.scale;
    }
    const float m = *std::max_element(s, s + visible);
    float sum = 0.0f;
    for (int64_t t = 0; t < visible; ++t) sum += (s[t] = std::exp(s[t] - m));
    const float inv = 1.0f / sum;
    float* o = out + g * d;
    std::fill(o, o + d, 0.0f);
    for (int64_t t = 0; t < visible; ++t) {
      const float p = s[t] * inv;
      const float* vt = value(t);
      for (int c = 0; c < d; ++c) o[c] += p * vt[c];
    }
  }
}

}  // namespace oscar
