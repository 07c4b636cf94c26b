// Decode over quantized history rows: scores and the weighted sum straight from the
// packed codes through the codec's row dot / axpy (vectorized inside the codec).
#include <algorithm>
#include <cmath>
#include <vector>

#include "oscar/attention/attention_decode_kernels.h"

namespace oscar {

void decode_chunk_history(const DecodeChunk& c, SoftmaxPartial* part, float* part_o) {
  const int d = c.kv.head_dim, G = c.group;
  const int64_t n = c.end - c.begin;
  const HistoryFormat& kf = *c.kv.k_format;
  const HistoryFormat& vf = *c.kv.v_format;
  std::vector<float> s(static_cast<size_t>(n * G));
  for (int64_t t = 0; t < n; ++t) {
    int row = 0;
    const uint8_t* kb = c.kv.history_block(c.kv.qk_pool, kf, c.kv_head, c.begin + t, &row);
    for (int g = 0; g < G; ++g)
      s[size_t(g * n + t)] = (history_dot(kf, kb, row, c.q + g * d) + (c.score_add ? c.score_add[g * n + t] : 0.0f)) * c.scale;
  }
  for (int g = 0; g < G; ++g) {
    float* sg = s.data() + g * n;
    part[g].m = n > 0 ? *std::max_element(sg, sg + n) : -INFINITY;
    part[g].l = 0.0f;
    for (int64_t t = 0; t < n; ++t) part[g].l += (sg[t] = std::exp(sg[t] - part[g].m));
    std::fill(part_o + g * d, part_o + (g + 1) * d, 0.0f);
  }
  for (int64_t t = 0; t < n; ++t) {
    int row = 0;
    const uint8_t* vb = c.kv.history_block(c.kv.qv_pool, vf, c.kv_head, c.begin + t, &row);
    for (int g = 0; g < G; ++g) history_axpy(vf, vb, row, s[size_t(g * n + t)], part_o + g * d);
  }
}

}  // namespace oscar
