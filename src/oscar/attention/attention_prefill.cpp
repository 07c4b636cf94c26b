// Prefill attention through sgemm. For a quantized cache each query sees exactly what
// decode would have shown it at its own position: keys in its history range
// [sink, history_end(p + 1)) come dequantized from the history pages, the others
// (sink, recent window, itself) at full precision. So perplexity measures the cache.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "oscar/attention/attention.h"
#include "oscar/ops/activation.h"

namespace oscar {

void attention_prefill(const AttentionShape& s, const KvCache& cache, int layer, SeqId seq, const float* q,
                       int64_t n_q, int64_t q_pos0, float* out, const float* key_add) {
  const int d = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t n_kv = q_pos0 + n_q;
  const KvSpec& spec = cache.spec();
  const KvSeqView view = cache.view(layer, seq, n_kv);
  const int64_t hb = view.hist_begin, he_max = view.hist_end;
  const bool has_history = he_max > hb;
  const float scale = 1.0f / std::sqrt(float(d));
  const int64_t tile = 128;  // query tile: bounds the score buffers to tile × n_kv floats
  const auto sz = [](int64_t n) { return static_cast<size_t>(n); };
  std::vector<float> k(sz(n_kv * d)), v(sz(n_kv * d)), kq, vq;
  if (has_history) {
    kq.resize(sz(n_kv * d));
    vq.resize(sz(n_kv * d));
  }
  std::vector<float> qh(sz(tile * d)), oh(sz(tile * d)), scores(sz(tile * n_kv)), hscores;
  if (has_history) hscores.resize(sz(tile * (he_max - hb)));
  for (int kvh = 0; kvh < s.n_kv_heads; ++kvh) {
    cache.gather_fp(layer, seq, kvh, n_kv, k.data(), v.data());
    if (has_history) cache.gather_history(layer, seq, kvh, n_kv, kq.data(), vq.data());
    if (key_add)
      for (int64_t t = 0; t < n_kv; ++t) {
        const float* a = key_add + (t * s.n_kv_heads + kvh) * d;
        for (int c = 0; c < d; ++c) k[sz(t * d + c)] += a[c];
        if (has_history && t >= hb && t < he_max)
          for (int c = 0; c < d; ++c) kq[sz(t * d + c)] += a[c];
      }
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
      for (int64_t i0 = 0; i0 < n_q; i0 += tile) {
        const int64_t m = std::min(tile, n_q - i0);
        const int64_t n_seen = q_pos0 + i0 + m;  // keys visible to the tile's last query
        const int64_t he_tile = spec.history_end(n_seen);
        const int64_t n_hist = std::max<int64_t>(0, he_tile - hb);
        for (int64_t i = 0; i < m; ++i) std::copy_n(q + ((i0 + i) * s.n_heads + h) * d, d, qh.data() + i * d);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n_seen), d, scale, qh.data(), d, k.data(), d,
                    0.0f, scores.data(), int(n_seen));
        if (n_hist > 0)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n_hist), d, scale, qh.data(), d,
                      kq.data() + hb * d, d, 0.0f, hscores.data(), int(n_hist));
        for (int64_t i = 0; i < m; ++i) {
          float* row = scores.data() + i * n_seen;
          float* hrow = hscores.data() + i * n_hist;
          const int64_t visible = q_pos0 + i0 + i + 1;
          const int64_t he_i = std::max(hb, spec.history_end(visible));
          for (int64_t t = hb; t < he_i; ++t) row[t] = hrow[t - hb];  // this query's history keys
          softmax_inplace(row, visible);
          std::fill(row + visible, row + n_seen, 0.0f);  // causal mask
          // Split the probabilities: history keys weight the dequantized values.
          for (int64_t t = hb; t < hb + n_hist; ++t) {
            hrow[t - hb] = t < he_i ? row[t] : 0.0f;
            if (t < he_i) row[t] = 0.0f;
          }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), d, int(n_seen), 1.0f, scores.data(),
                    int(n_seen), v.data(), d, 0.0f, oh.data(), d);
        if (n_hist > 0)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), d, int(n_hist), 1.0f, hscores.data(),
                      int(n_hist), vq.data() + hb * d, d, 1.0f, oh.data(), d);
        for (int64_t i = 0; i < m; ++i) std::copy_n(oh.data() + i * d, d, out + ((i0 + i) * s.n_heads + h) * d);
      }
    }
  }
}

}  // namespace oscar
