#include <algorithm>
#include <cmath>
#include <vector>

#include "oscar/attention/attention.h"
#include "oscar/attention/attention_decode_kernels.h"
#include "oscar/attention/online_softmax.h"
#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {

void attention_decode(const AttentionShape& s, const KvSeqView& kv, const float* q, float* out,
                      const KeyBias* key_bias) {
  const int d = s.head_dim, group = s.n_heads / s.n_kv_heads;
  OSCAR_CHECK(group <= kMaxDecodeGroup, "GQA group {} exceeds {}", group, kMaxDecodeGroup);
  OSCAR_CHECK(d <= kMaxDecodeHeadDim && d % 8 == 0, "head_dim {} unsupported by decode attention", d);
  // Key ranges of at most 256 keys that never straddle a segment boundary, so each
  // task reads one storage format; small enough to spread one head over all threads.
  const int64_t chunk = 256;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  auto add_segment = [&](int64_t b, int64_t e) {
    for (int64_t x = b; x < e; x += chunk) ranges.emplace_back(x, std::min(e, x + chunk));
  };
  add_segment(0, kv.hist_begin);
  add_segment(kv.hist_begin, kv.hist_end);
  add_segment(kv.hist_end, kv.n_tokens);
  if (ranges.empty()) ranges.emplace_back(0, 0);
  const int64_t n_chunks = int64_t(ranges.size());
  const int64_t n_tasks = int64_t(s.n_kv_heads) * n_chunks;
  std::vector<SoftmaxPartial> part(size_t(n_tasks * group));
  std::vector<float> part_o(size_t(n_tasks * group * d));
  const float scale = 1.0f / std::sqrt(float(d));
  const bool avx2 = use_avx2();
  std::vector<float> coef;  // each query head's key-bias coefficients, once per step
  if (key_bias) {
    OSCAR_CHECK(key_bias->n_kv_heads() == s.n_kv_heads && key_bias->head_dim() == d, "key bias of another shape");
    coef.resize(size_t(s.n_heads) * d);
    key_bias->coefficients(q, s.n_heads, coef.data());
  }
  default_pool().parallel_for(n_tasks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> score_add;
    for (int64_t task = t0; task < t1; ++task) {
      const int kvh = int(task / n_chunks);
      const auto [begin, end] = ranges[size_t(task % n_chunks)];
      DecodeChunk c{kv, kvh, begin, end, q + int64_t(kvh) * group * d, group, scale};
      if (key_bias) {  // q · a_t for the chunk's keys, added to each score
        const int64_t n = end - begin;
        score_add.resize(size_t(group * n));
        const float* cg = coef.data() + int64_t(kvh) * group * d;
        if (avx2) {
          key_bias->scores_avx2(cg, group, begin, n, score_add.data());
        } else {
          key_bias->scores_scalar(cg, group, begin, n, score_add.data());
        }
        c.score_add = score_add.data();
      }
      SoftmaxPartial* pp = part.data() + task * group;
      float* po = part_o.data() + task * group * d;
      if (begin < end && kv.in_history(begin)) {
        decode_chunk_history(c, pp, po);
      } else if (avx2) {
        decode_chunk_avx2(c, pp, po);
      } else {
        decode_chunk_scalar(c, pp, po);
      }
    }
  });
  for (int kvh = 0; kvh < s.n_kv_heads; ++kvh) {
    for (int g = 0; g < group; ++g) {
      SoftmaxPartial acc;
      float* o = out + (int64_t(kvh) * group + g) * d;
      std::fill(o, o + d, 0.0f);
      for (int64_t ci = 0; ci < n_chunks; ++ci) {
        const int64_t idx = (int64_t(kvh) * n_chunks + ci) * group + g;
        softmax_merge(acc, o, part[size_t(idx)], part_o.data() + idx * d, d);
      }
      const float inv = acc.l > 0.0f ? 1.0f / acc.l : 0.0f;
      for (int c = 0; c < d; ++c) o[c] *= inv;
    }
  }
}

}  // namespace oscar
