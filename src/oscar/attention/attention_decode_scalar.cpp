#include <algorithm>
#include <cmath>
#include <vector>

#include "oscar/attention/attention_decode_kernels.h"
#include "oscar/core/dtype.h"

namespace oscar {

namespace {
void load_row(const KvSeqView& kv, const uint8_t* pool, int kvh, int64_t t, float* dst) {
  const int64_t off = kv.row_offset(kvh, t);
  if (kv.dtype == KvDtype::f32) {
    std::copy_n(reinterpret_cast<const float*>(pool + off), kv.head_dim, dst);
  } else {
    const bf16* src = reinterpret_cast<const bf16*>(pool + off);
    for (int c = 0; c < kv.head_dim; ++c) dst[c] = bf16_to_f32(src[c]);
  }
}
}  // namespace

void decode_chunk_scalar(const DecodeChunk& c, SoftmaxPartial* part, float* part_o) {
  const int d = c.kv.head_dim;
  const int64_t n = c.end - c.begin;
  std::vector<float> row(static_cast<size_t>(d));
  std::vector<float> s(static_cast<size_t>(n * c.group));
  for (int64_t t = 0; t < n; ++t) {
    load_row(c.kv, c.kv.k_pool, c.kv_head, c.begin + t, row.data());
    for (int g = 0; g < c.group; ++g) {
      float dot = 0.0f;
      for (int i = 0; i < d; ++i) dot += c.q[g * d + i] * row[size_t(i)];
      s[size_t(g * n + t)] = (dot + (c.score_add ? c.score_add[g * n + t] : 0.0f)) * c.scale;
    }
  }
  for (int g = 0; g < c.group; ++g) {
    float* sg = s.data() + g * n;
    part[g].m = n > 0 ? *std::max_element(sg, sg + n) : -INFINITY;
    part[g].l = 0.0f;
    for (int64_t t = 0; t < n; ++t) part[g].l += (sg[t] = std::exp(sg[t] - part[g].m));
    std::fill(part_o + g * d, part_o + (g + 1) * d, 0.0f);
  }
  for (int64_t t = 0; t < n; ++t) {
    load_row(c.kv, c.kv.v_pool, c.kv_head, c.begin + t, row.data());
    for (int g = 0; g < c.group; ++g) {
      const float p = s[size_t(g * n + t)];
      for (int i = 0; i < d; ++i) part_o[g * d + i] += p * row[size_t(i)];
    }
  }
}

}  // namespace oscar
