#include "oscar/eval/kv_error.h"

#include <cmath>

#include "oscar/core/error.h"
#include "oscar/kv/kv_cache.h"

namespace oscar {

QkvRecorder::QkvRecorder(int n_layers, const AttentionShape& shape) : shape_(shape), layers_(size_t(n_layers)) {}

void QkvRecorder::on_attention_inputs(int layer, int64_t n, const float* q, const float* k, const float* v) {
  LayerQkv& l = layers_[size_t(layer)];
  const int64_t qn = n * shape_.n_heads * shape_.head_dim, kvn = n * shape_.n_kv_heads * shape_.head_dim;
  l.q.insert(l.q.end(), q, q + qn);
  l.k.insert(l.k.end(), k, k + kvn);
  l.v.insert(l.v.end(), v, v + kvn);
}

int64_t QkvRecorder::tokens(int l) const {
  return int64_t(layers_[size_t(l)].k.size()) / (int64_t(shape_.n_kv_heads) * shape_.head_dim);
}

CachedAttention cached_attention(const AttentionShape& s, const LayerQkv& x, int64_t n_tokens, int64_t n_queries,
                                 const LayerKvFormat& f) {
  const int64_t d = s.head_dim, qd = s.n_heads * d, kvd = s.n_kv_heads * d;
  OSCAR_CHECK(n_tokens > 0 && n_queries > 0 && n_queries <= n_tokens, "bad token/query counts");
  OSCAR_CHECK(int64_t(x.k.size()) >= n_tokens * kvd && int64_t(x.q.size()) >= n_tokens * qd,
              "fewer recorded rows than n_tokens");
  std::vector<HistoryFormat> kf, vf;
  if (f.spec.quantized()) {
    OSCAR_CHECK(f.k_format && f.v_format, "a quantized KV spec needs history formats");
    kf = {*f.k_format};
    vf = {*f.v_format};
  }
  KvCache cache(KvShape{1, s.n_kv_heads, s.head_dim}, f.spec, n_tokens, kf, vf);
  const SeqId seq = cache.add_sequence();
  OSCAR_CHECK(cache.reserve(seq, n_tokens), "one-layer cache refused {} tokens", n_tokens);

  std::vector<float> k(x.k.begin(), x.k.begin() + n_tokens * kvd), v(x.v.begin(), x.v.begin() + n_tokens * kvd);
  const int64_t q0 = n_tokens - n_queries;
  std::vector<float> q(x.q.begin() + q0 * qd, x.q.begin() + n_tokens * qd);
  const bool rotate = f.rotator && f.rotator->active();
  if (rotate) {
    f.rotator->rotate_k(f.layer, q.data(), n_queries * s.n_heads);
    f.rotator->rotate_k(f.layer, k.data(), n_tokens * s.n_kv_heads);
    f.rotator->rotate_v(f.layer, v.data(), n_tokens * s.n_kv_heads);
  }
  std::vector<float> key_add;
  if (f.k_bias_rows) {  // as the model does: store k − b(p), add b(p) back in attention
    key_add.assign(f.k_bias_rows, f.k_bias_rows + n_tokens * kvd);
    if (rotate) f.rotator->rotate_k(f.layer, key_add.data(), n_tokens * s.n_kv_heads);
    for (size_t i = 0; i < key_add.size(); ++i) k[i] -= key_add[i];
  }
  cache.write(0, seq, 0, n_tokens, k.data(), v.data());
  cache.demote(0, seq, n_tokens);

  CachedAttention r;
  r.out.resize(size_t(n_queries * qd));
  attention_prefill(s, cache, 0, seq, q.data(), n_queries, q0, r.out.data(), key_add.empty() ? nullptr : key_add.data());
  if (rotate) f.rotator->unrotate_o(f.layer, r.out.data(), n_queries * s.n_heads);
  // Only now, as the model does after its last layer: commit releases the fp pages of
  // rows that are history at n_tokens, which earlier queries still read in full precision.
  cache.commit(seq, n_tokens);
  r.bits_per_element = cache.bits_per_element(seq);
  return r;
}

double relative_l2_error(std::span<const float> a, std::span<const float> ref) {
  OSCAR_CHECK(a.size() == ref.size(), "relative_l2_error: sizes {} and {} differ", a.size(), ref.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = double(a[i]) - double(ref[i]);
    num += e * e;
    den += double(ref[i]) * double(ref[i]);
  }
  if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
  return std::sqrt(num / den);
}

}  // namespace oscar
