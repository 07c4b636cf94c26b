#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "oscar/attention/attention.h"
#include "oscar/ops/activation.h"

namespace oscar {

void attention_prefill(const AttentionShape& s, const KvCache& cache, int layer, SeqId seq, const float* q,
                       int64_t n_q, int64_t q_pos0, float* out) {
  const int d = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t n_kv = q_pos0 + n_q;
  const float scale = 1.0f / std::sqrt(float(d));
  // Query tiles bound the score buffer to tile × n_kv floats.
  const int64_t tile = 128;
  std::vector<float> k(size_t(n_kv * d)), v(size_t(n_kv * d));
  std::vector<float> qh(size_t(tile * d)), oh(size_t(tile * d)), scores(size_t(tile * n_kv));
  for (int kvh = 0; kvh < s.n_kv_heads; ++kvh) {
    cache.gather_f32(layer, seq, kvh, n_kv, k.data(), v.data());
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
      for (int64_t i0 = 0; i0 < n_q; i0 += tile) {
        const int64_t m = std::min(tile, n_q - i0);
        const int64_t n_seen = q_pos0 + i0 + m;  // keys visible to the last query of the tile
        for (int64_t i = 0; i < m; ++i)
          std::copy_n(q + ((i0 + i) * s.n_heads + h) * d, d, qh.data() + i * d);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n_seen), d, scale, qh.data(), d, k.data(), d,
                    0.0f, scores.data(), int(n_seen));
        for (int64_t i = 0; i < m; ++i) {
          float* row = scores.data() + i * n_seen;
          const int64_t visible = q_pos0 + i0 + i + 1;
          softmax_inplace(row, visible);
          std::fill(row + visible, row + n_seen, 0.0f);  // causal mask
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), d, int(n_seen), 1.0f, scores.data(),
                    int(n_seen), v.data(), d, 0.0f, oh.data(), d);
        for (int64_t i = 0; i < m; ++i) std::copy_n(oh.data() + i * d, d, out + ((i0 + i) * s.n_heads + h) * d);
      }
    }
  }
}

}  // namespace oscar
