// Decode over quantized history rows: the dispatch to the AVX2 kernel, the generic path
// through the codec's row dot / axpy, and the scalar reference both are tested against.
#include <algorithm>
#include <cmath>
#include <vector>

#include "oscar/attention/attention_decode_kernels.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {

void decode_chunk_history(const DecodeChunk& c, SoftmaxPartial* part, float* part_o) {
  if (use_avx2() && decode_history_avx2_supports(*c.kv.k_format) && decode_history_avx2_supports(*c.kv.v_format))
    return decode_chunk_history_avx2(c, part, part_o);
  decode_chunk_history_generic(c, part, part_o);
}

void decode_chunk_history_generic(const DecodeChunk& c, SoftmaxPartial* part, float* part_o) {
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

void decode_chunk_history_ref(const DecodeChunk& c, SoftmaxPartial* part, float* part_o) {
  const int d = c.kv.head_dim, G = c.group;
  const int64_t n = c.end - c.begin;
  std::vector<float> k(static_cast<size_t>(n * d)), v(static_cast<size_t>(n * d));
  for (int64_t t = 0; t < n; ++t) {
    int row = 0;
    const uint8_t* kb = c.kv.history_block(c.kv.qk_pool, *c.kv.k_format, c.kv_head, c.begin + t, &row);
    history_load(*c.kv.k_format, kb, row, k.data() + t * d);
    const uint8_t* vb = c.kv.history_block(c.kv.qv_pool, *c.kv.v_format, c.kv_head, c.begin + t, &row);
    history_load(*c.kv.v_format, vb, row, v.data() + t * d);
  }
  std::vector<double> s(static_cast<size_t>(n)), o(static_cast<size_t>(d));
  for (int g = 0; g < G; ++g) {
    double m = -INFINITY;
    for (int64_t t = 0; t < n; ++t) {
      double dot = c.score_add ? double(c.score_add[g * n + t]) : 0.0;
      for (int i = 0; i < d; ++i) dot += double(c.q[g * d + i]) * double(k[size_t(t * d + i)]);
      s[size_t(t)] = dot * double(c.scale);
      m = std::max(m, s[size_t(t)]);
    }
    double l = 0.0;
    std::fill(o.begin(), o.end(), 0.0);
    for (int64_t t = 0; t < n; ++t) {
      const double p = std::exp(s[size_t(t)] - m);
      l += p;
      for (int i = 0; i < d; ++i) o[size_t(i)] += p * double(v[size_t(t * d + i)]);
    }
    part[g].m = float(m);
    part[g].l = float(l);
    for (int i = 0; i < d; ++i) part_o[g * d + i] = float(o[size_t(i)]);
  }
}

}  // namespace oscar
