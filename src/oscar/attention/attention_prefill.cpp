// Prefill attention. For a quantized cache each query sees exactly what decode would have
// shown it at its own position: keys in its history range [sink, history_end(p + 1)) come
// dequantized from the history pages, the others (sink, recent window, itself) at full
// precision. So perplexity measures the cache. Each position is computed on its own, in
// position order (prefill_position.h): a prompt's rows do not depend on how it was chunked.
#include <algorithm>
#include <cmath>
#include <vector>

#include "oscar/attention/attention.h"
#include "oscar/attention/prefill_position.h"
#include "oscar/core/thread_pool.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {

void attention_prefill(const AttentionShape& s, const KvCache& cache, int layer, SeqId seq, const float* q,
                       int64_t n_q, int64_t q_pos0, float* out, const float* key_add) {
  const int d = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t n_kv = q_pos0 + n_q;
  const KvSpec& spec = cache.spec();
  const KvSeqView view = cache.view(layer, seq, n_kv);
  const int64_t hb = view.hist_begin, he_max = view.hist_end;
  const bool has_history = he_max > hb;
  const auto sz = [](int64_t n) { return static_cast<size_t>(n); };
  std::vector<float> k(sz(n_kv * d)), v(sz(n_kv * d)), kq, vq;
  if (has_history) {
    kq.resize(sz(n_kv * d));
    vq.resize(sz(n_kv * d));
  }
  const auto position = use_avx2() ? prefill_position_avx2 : prefill_position_ref;
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
    PrefillPositionArgs args;
    args.group = group;
    args.head_dim = d;
    args.scale = 1.0f / std::sqrt(float(d));
    args.k = k.data(), args.v = v.data();
    args.kq = has_history ? kq.data() : nullptr, args.vq = has_history ? vq.data() : nullptr;
    args.hb = hb;
    default_pool().parallel_for(n_q, 4, [&](int64_t i0, int64_t i1) {
      thread_local std::vector<float> scores;
      if (scores.size() < sz(int64_t(group) * n_kv)) scores.resize(sz(int64_t(group) * n_kv));
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t visible = q_pos0 + i + 1;
        PrefillPositionArgs a = args;
        a.he = has_history ? std::max(hb, spec.history_end(visible)) : hb;
        const int64_t at = (i * s.n_heads + int64_t(kvh) * group) * d;  // the group's heads are adjacent
        position(a, q + at, visible, scores.data(), out + at);
      }
    });
  }
}

}  // namespace oscar
