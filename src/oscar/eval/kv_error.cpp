#include "oscar/eval/kv_error.h"

#include <cmath>

#include "oscar/core/error.h"
#include "oscar/kv/history_formats.h"
#include "oscar/kv/kv_cache.h"
#include "oscar/ops/rope.h"

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
  if (f.k_mean)
    for (int64_t i = 0; i < n_tokens * kvd; ++i) k[size_t(i)] -= f.k_mean[i % kvd];
  if (f.k_scale) {  // as the model does: (q ⊙ s)·((k − m) ⊘ s) = q·(k − m)
    scale_query_rows(f.k_scale, s.n_heads, s.n_kv_heads, s.head_dim, q.data(), n_queries);
    unscale_key_rows(f.k_scale, s.n_kv_heads, s.head_dim, k.data(), n_tokens);
  }
  const bool rotate = f.rotator && f.rotator->active();
  if (rotate) {
    f.rotator->rotate_k(f.layer, q.data(), n_queries * s.n_heads);
    f.rotator->rotate_k(f.layer, k.data(), n_tokens * s.n_kv_heads);
    f.rotator->rotate_v(f.layer, v.data(), n_tokens * s.n_kv_heads);
  }
  std::vector<float> key_add;
  if (f.k_bias_rows) {  // as the model does: store k − b(p), add b(p) back in attention
    key_add.assign(f.k_bias_rows, f.k_bias_rows + n_tokens * kvd);
    if (f.k_scale) unscale_key_rows(f.k_scale, s.n_kv_heads, s.head_dim, key_add.data(), n_tokens);
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

KvErrorProbe::KvErrorProbe(const Transformer& model, const QkvRecorder& rec, int64_t n_tokens, int64_t n_queries)
    : model_(model), rec_(rec), n_(n_tokens), queries_(n_queries) {
  const ModelConfig& c = model.config();
  shape_ = AttentionShape{c.n_heads, c.n_kv_heads, c.head_dim};
  OSCAR_CHECK(n_queries >= 1 && n_queries <= n_tokens, "queries {} must be in [1, {}]", n_queries, n_tokens);
  const KvSpec f32 = KvSpec::parse("f32");
  const RopeFreqs rope = rope_freqs(c);
  for (int l = 0; l < c.n_layers; ++l) {
    OSCAR_CHECK(rec.tokens(l) >= n_tokens, "layer {}: {} recorded tokens, fewer than {}", l, rec.tokens(l), n_tokens);
    reference_.push_back(cached_attention(shape_, rec.layer(l), n_, queries_, LayerKvFormat{f32, nullptr, nullptr, nullptr, l}).out);
    std::vector<float> rows;
    const std::vector<float>& bk = model.weights().layers[size_t(l)].bk;
    if (!bk.empty()) append_rope_rows(rope, bk.data(), c.n_kv_heads, c.head_dim, 0, n_, rows);
    bias_rows_.push_back(std::move(rows));
  }
}

KvErrorProbe::LayerResult KvErrorProbe::layer(const KvSpec& spec, const RotationSet* rs, int l) const {
  const ModelConfig& c = model_.config();
  // The layer as its own plain spec; a bf16 layer of a mixed spec runs without history,
  // which its bf16_raw rows equal exactly.
  const KvSpec ls = spec.layer_spec(l);
  const bool calibrated = ls.rotation == KvRotation::calibrated;
  if (calibrated && !rs) fail("KV type '{}' needs calibrated rotations", ls.name());
  std::vector<HistoryFormat> kf, vf;
  if (ls.quantized()) std::tie(kf, vf) = make_history_formats(ls, model_.kv_shape(), calibrated ? rs : nullptr);
  const KvRotator rot = KvRotator::for_spec(ls, c.n_layers, c.head_dim, calibrated ? rs : nullptr, /*v_absorbed=*/false);
  LayerKvFormat f{ls, ls.quantized() ? &kf[size_t(l)] : nullptr, ls.quantized() ? &vf[size_t(l)] : nullptr, &rot, l};
  const std::vector<float>& bias = bias_rows_[size_t(l)];
  if (spec.k_bias_split && !bias.empty()) f.k_bias_rows = bias.data();
  f.k_mean = layer_key_mean(spec, calibrated ? rs : nullptr, l, c.n_kv_heads, c.head_dim);
  f.k_scale = layer_key_scale(spec, calibrated ? rs : nullptr, l, c.n_kv_heads, c.head_dim);
  const CachedAttention a = cached_attention(shape_, rec_.layer(l), n_, queries_, f);
  const double history_bits = ls.quantized() ? (kf[size_t(l)].bits_per_element() + vf[size_t(l)].bits_per_element()) / 2
                                             : 8.0 * ls.fp_bytes_per_element();
  return {relative_l2_error(a.out, reference_[size_t(l)]), a.bits_per_element, history_bits};
}

std::vector<KvErrorProbe::LayerResult> KvErrorProbe::all_layers(const KvSpec& spec, const RotationSet* rs) const {
  std::vector<LayerResult> r;
  for (int l = 0; l < model_.config().n_layers; ++l) r.push_back(layer(spec, rs, l));
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
