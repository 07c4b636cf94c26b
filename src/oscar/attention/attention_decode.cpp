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

void attention_decode(const AttentionShape& s, const KvSeqView& kv, const float* q, float* out) {
  const int d = s.head_dim, group = s.n_heads / s.n_kv_heads;
  OSCAR_CHECK(group <= kMaxDecodeGroup, "GQA group {} exceeds {}", group, kMaxDecodeGroup);
  OSCAR_CHECK(d <= kMaxDecodeHeadDim && d % 8 == 0, "head_dim {} unsupported by decode attention", d);
  // Chunks of keys small enough to spread a single head over all threads.
  const int64_t chunk = 256;
  const int64_t n_chunks = std::max<int64_t>(1, (kv.n_tokens + chunk - 1) / chunk);
  const int64_t n_tasks = int64_t(s.n_kv_heads) * n_chunks;
  std::vector<SoftmaxPartial> part(size_t(n_tasks * group));
  std::vector<float> part_o(size_t(n_tasks * group * d));
  const float scale = 1.0f / std::sqrt(float(d));
  const bool avx2 = use_avx2();
  default_pool().parallel_for(n_tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      const int kvh = int(task / n_chunks);
      const int64_t begin = (task % n_chunks) * chunk, end = std::min(kv.n_tokens, begin + chunk);
      DecodeChunk c{kv, kvh, begin, end, q + int64_t(kvh) * group * d, group, scale};
      SoftmaxPartial* pp = part.data() + task * group;
      float* po = part_o.data() + task * group * d;
      if (avx2) {
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
