#include <cmath>
#include <vector>

#include "oscar/attention/attention.h"
#include "oscar/core/dtype.h"

namespace oscar {

void attention_ref(const AttentionShape& s, const float* q, int64_t n_q, int64_t q_pos0, const float* k,
                   const float* v, int64_t n_kv, float* out) {
  const int d = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> p;
  for (int64_t i = 0; i < n_q; ++i) {
    const int64_t n_seen = std::min(n_kv, q_pos0 + i + 1);
    for (int h = 0; h < s.n_heads; ++h) {
      const float* qh = q + (i * s.n_heads + h) * d;
      const float* kh = k + int64_t(h / group) * n_kv * d;
      const float* vh = v + int64_t(h / group) * n_kv * d;
      p.assign(size_t(n_seen), 0.0);
      double m = -INFINITY;
      for (int64_t t = 0; t < n_seen; ++t) {
        double dot = 0.0;
        for (int c = 0; c < d; ++c) dot += double(qh[c]) * kh[t * d + c];
        p[size_t(t)] = dot * scale;
        m = std::max(m, p[size_t(t)]);
      }
      double sum = 0.0;
      for (double& x : p) sum += (x = std::exp(x - m));
      float* o = out + (i * s.n_heads + h) * d;
      for (int c = 0; c < d; ++c) {
        double acc = 0.0;
        for (int64_t t = 0; t < n_seen; ++t) acc += p[size_t(t)] * vh[t * d + c];
        o[c] = float(acc / sum);
      }
    }
  }
}

namespace {
// Row t of one KV head as f32: from the fp pages, or dequantized from history.
void load_row(const KvSeqView& kv, bool key, int kvh, int64_t t, float* out) {
  if (kv.in_history(t)) {
    int row = 0;
    const HistoryFormat& f = key ? *kv.k_format : *kv.v_format;
    const uint8_t* block = kv.history_block(key ? kv.qk_pool : kv.qv_pool, f, kvh, t, &row);  // sets row first
    history_load(f, block, row, out);
    return;
  }
  const uint8_t* p = (key ? kv.k_pool : kv.v_pool) + kv.row_offset(kvh, t);
  for (int c = 0; c < kv.head_dim; ++c)
    out[c] = kv.dtype == KvDtype::f32 ? reinterpret_cast<const float*>(p)[c]
                                      : bf16_to_f32(reinterpret_cast<const bf16*>(p)[c]);
}
}  // namespace

void attention_decode_ref(const AttentionShape& s, const KvSeqView& kv, const float* q, float* out,
                          const float* key_add) {
  const int d = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> p(static_cast<size_t>(kv.n_tokens));
  std::vector<float> row(static_cast<size_t>(d));
  for (int h = 0; h < s.n_heads; ++h) {
    const int kvh = h / group;
    double m = -INFINITY;
    for (int64_t t = 0; t < kv.n_tokens; ++t) {
      load_row(kv, true, kvh, t, row.data());
      double dot = 0.0;
      for (int c = 0; c < d; ++c) dot += double(q[h * d + c]) * row[size_t(c)];
      if (key_add)
        for (int c = 0; c < d; ++c) dot += double(q[h * d + c]) * key_add[(t * s.n_kv_heads + kvh) * d + c];
      p[size_t(t)] = dot * scale;
      m = std::max(m, p[size_t(t)]);
    }
    double sum = 0.0;
    for (double& x : p) sum += (x = std::exp(x - m));
    std::vector<double> acc(size_t(d), 0.0);
    for (int64_t t = 0; t < kv.n_tokens; ++t) {
      load_row(kv, false, kvh, t, row.data());
      for (int c = 0; c < d; ++c) acc[size_t(c)] += p[size_t(t)] * row[size_t(c)];
    }
    for (int c = 0; c < d; ++c) out[h * d + c] = float(acc[size_t(c)] / sum);
  }
}

}  // namespace oscar
