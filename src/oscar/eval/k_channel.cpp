#include "oscar/eval/k_channel.h"

#include <cmath>

#include "oscar/rotation/key_scale.h"
#include "oscar/rotation/rotation_fit.h"
#include "oscar/core/error.h"
#include "oscar/kv/history_formats.h"
#include "oscar/model/kv_rotation.h"

namespace oscar {

std::string KChannelVariant::name() const {
  std::string s = "int2-oscar";
  if (center) s += "+k-center";
  if (mean) s += "+k-mean";
  if (scale) s += "+k-scale";
  if (refit && !scale) s += "+refit";
  return s;
}

double KChannelResult::mean_error() const {
  double s = 0.0;
  for (double e : layer_error) s += e;
  return layer_error.empty() ? 0.0 : s / double(layer_error.size());
}

KChannelTransform fit_k_channel_transform(const KChannelVariant& v, const LayerQkv& calib, int64_t n,
                                          const AttentionShape& s, const RopeFreqs& rope, std::span<const float> bias) {
  const int d = s.head_dim, nkv = s.n_kv_heads, group = s.n_heads / s.n_kv_heads;
  const int64_t kvd = int64_t(nkv) * d, qd = int64_t(s.n_heads) * d;
  OSCAR_CHECK(int64_t(calib.k.size()) >= n * kvd && int64_t(calib.q.size()) >= n * qd && n > 0,
              "k-channel fit: fewer than {} recorded rows", n);
  OSCAR_CHECK(bias.empty() || int64_t(bias.size()) == kvd, "k-channel fit: bias has {} values, expected {}", bias.size(), kvd);
  KChannelTransform t;

  // The centre: the mean pre-RoPE key (undo RoPE at each row's position), or b_k alone.
  if (v.center) {
    std::vector<double> sum(static_cast<size_t>(kvd), 0.0);
    std::vector<float> row(static_cast<size_t>(kvd));
    for (int64_t p = 0; p < n; ++p) {
      std::copy_n(calib.k.begin() + p * kvd, kvd, row.begin());
      rope_apply(rope, row.data(), nkv, d, -p);
      for (int64_t i = 0; i < kvd; ++i) sum[size_t(i)] += row[size_t(i)];
    }
    t.center.resize(size_t(kvd));
    for (int64_t i = 0; i < kvd; ++i) t.center[size_t(i)] = float(sum[size_t(i)] / double(n));
  } else if (!bias.empty()) {
    t.center.assign(bias.begin(), bias.end());
  }

  // The post-RoPE mean of k − RoPE(c, p), then per-channel second moments of the centred
  // key and of the group's queries.
  std::vector<float> centred(static_cast<size_t>(n * kvd));
  std::vector<float> c_rows;
  if (!t.center.empty()) append_rope_rows(rope, t.center.data(), nkv, d, 0, n, c_rows);
  std::vector<double> m(static_cast<size_t>(kvd), 0.0);
  for (int64_t i = 0; i < n * kvd; ++i) {
    centred[size_t(i)] = calib.k[size_t(i)] - (c_rows.empty() ? 0.0f : c_rows[size_t(i)]);
    m[size_t(i % kvd)] += centred[size_t(i)] / double(n);
  }
  if (v.mean) {
    t.mean.assign(m.begin(), m.end());
    for (int64_t i = 0; i < n * kvd; ++i) centred[size_t(i)] -= t.mean[size_t(i % kvd)];
  }
  std::vector<double> kk(size_t(kvd), 0.0), qq(size_t(kvd), 0.0);
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t i = 0; i < kvd; ++i) kk[size_t(i)] += double(centred[size_t(p * kvd + i)]) * centred[size_t(p * kvd + i)];
    for (int h = 0; h < s.n_heads; ++h)
      for (int c = 0; c < d; ++c) {
        const double q = calib.q[size_t(p * qd + int64_t(h) * d + c)];
        qq[size_t((h / group) * d + c)] += q * q / group;
      }
  }
  KeyScaleFit fit = key_scale_from_moments(kk, qq, nkv, d);
  t.predicted_gain = fit.predicted_gain;
  if (v.scale) t.scale = std::move(fit.scale);

  if (v.refit || v.scale) {  // R_K from the queries the cache will see: q̃ = q ⊙ s
    CovarianceAccumulator acc(s.n_heads, nkv, d);
    std::vector<float> q(calib.q.begin(), calib.q.begin() + n * qd);
    if (!t.scale.empty()) scale_query_rows(t.scale.data(), s.n_heads, nkv, d, q.data(), n);
    acc.add_pass1(q.data(), nullptr, nullptr, n);
    t.k_rotation = fit_rotation(acc.objective("qqt"), "r_h_pbr").rotation;
  }
  return t;
}

TransformedQkv apply_k_channel_transform(const KChannelTransform& t, const LayerQkv& x, int64_t n,
                                         const AttentionShape& s, const RopeFreqs& rope) {
  const int d = s.head_dim, nkv = s.n_kv_heads;
  const int64_t kvd = int64_t(nkv) * d, qd = int64_t(s.n_heads) * d;
  OSCAR_CHECK(int64_t(x.k.size()) >= n * kvd && int64_t(x.q.size()) >= n * qd, "k-channel: fewer than {} rows", n);
  TransformedQkv r;
  r.qkv.q.assign(x.q.begin(), x.q.begin() + n * qd);
  r.qkv.k.assign(x.k.begin(), x.k.begin() + n * kvd);
  r.qkv.v.assign(x.v.begin(), x.v.begin() + n * kvd);
  if (!t.center.empty()) append_rope_rows(rope, t.center.data(), nkv, d, 0, n, r.split_rows);
  if (!t.mean.empty())
    for (int64_t i = 0; i < n * kvd; ++i) r.qkv.k[size_t(i)] -= t.mean[size_t(i % kvd)];
  if (t.scale.empty()) return r;
  for (int64_t i = 0; i < n * kvd; ++i) {
    r.qkv.k[size_t(i)] /= t.scale[size_t(i % kvd)];
    if (!r.split_rows.empty()) r.split_rows[size_t(i)] /= t.scale[size_t(i % kvd)];
  }
  scale_query_rows(t.scale.data(), s.n_heads, nkv, d, r.qkv.q.data(), n);
  return r;
}

namespace {

// Layer l's attention-output error with transform t, rotations rs (layer l's R_K and
// clips as set there) against the f32 output `reference` of the untransformed rows.
double transformed_error(const Transformer& model, const KvSpec& ls, const RotationSet& rs, int l,
                         const TransformedQkv& x, int64_t n, int64_t n_queries, const std::vector<float>& reference,
                         const float* k_mean = nullptr, const float* k_scale = nullptr) {
  const ModelConfig& c = model.config();
  const auto [kf, vf] = make_history_formats(ls, model.kv_shape(), &rs);
  const KvRotator rot = KvRotator::for_spec(ls, c.n_layers, c.head_dim, &rs, /*v_absorbed=*/false);
  LayerKvFormat f{ls, &kf[size_t(l)], &vf[size_t(l)], &rot, l};
  if (!x.split_rows.empty()) f.k_bias_rows = x.split_rows.data();
  f.k_mean = k_mean;
  f.k_scale = k_scale;
  const CachedAttention a = cached_attention(AttentionShape{c.n_heads, c.n_kv_heads, c.head_dim}, x.qkv, n, n_queries, f);
  return relative_l2_error(a.out, reference);
}

}  // namespace

std::vector<KChannelResult> compare_k_channel_variants(const Transformer& model, const QkvRecorder& calib,
                                                       const QkvRecorder& eval, int64_t n, int64_t n_queries,
                                                       const KvSpec& spec, const RotationSet& rs,
                                                       std::span<const KChannelVariant> variants,
                                                       std::span<const float> clip_grid) {
  const ModelConfig& c = model.config();
  const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim};
  if (!spec.uses_rotation(KvRotation::calibrated, c.n_layers) || spec.mixed() || !spec.quantized())
    fail("k-channel comparison needs a uniform calibrated KV type (int2-oscar*), got '{}'", spec.name());
  const RopeFreqs rope = rope_freqs(c);
  const KvSpec f32 = KvSpec::parse("f32");
  const KvSpec ls = spec.layer_spec(0);

  std::vector<KChannelResult> out(variants.size() + 1);
  out[0].variant = spec.name() + " (as calibrated)";
  for (size_t i = 0; i < variants.size(); ++i) out[i + 1].variant = variants[i].name();
  for (int l = 0; l < c.n_layers; ++l) {
    const std::vector<float>& bk = model.weights().layers[size_t(l)].bk;
    const std::span<const float> bias = spec.k_bias_split ? std::span<const float>(bk) : std::span<const float>();
    auto reference = [&](const QkvRecorder& r) {
      return cached_attention(shape, r.layer(l), n, n_queries, LayerKvFormat{f32, nullptr, nullptr, nullptr, l}).out;
    };
    const std::vector<float> ref_calib = reference(calib), ref_eval = reference(eval);

    const KChannelTransform plain = fit_k_channel_transform({}, calib.layer(l), n, shape, rope, bias);
    out[0].layer_error.push_back(transformed_error(model, ls, rs, l, apply_k_channel_transform(plain, eval.layer(l), n, shape, rope),
                                                   n, n_queries, ref_eval,
                                                   layer_key_mean(spec, &rs, l, c.n_kv_heads, c.head_dim),
                                                   layer_key_scale(spec, &rs, l, c.n_kv_heads, c.head_dim)));
    out[0].k_clip.push_back(rs.layers[size_t(l)].k_clip);
    out[0].predicted_gain.push_back(plain.predicted_gain);

    for (size_t i = 0; i < variants.size(); ++i) {
      const KChannelTransform t = fit_k_channel_transform(variants[i], calib.layer(l), n, shape, rope, bias);
      RotationSet r2 = rs;
      if (!t.k_rotation.empty()) r2.layers[size_t(l)].k_rotation = t.k_rotation;
      const TransformedQkv xc = apply_k_channel_transform(t, calib.layer(l), n, shape, rope);
      float best_clip = r2.layers[size_t(l)].k_clip;
      double best = transformed_error(model, ls, r2, l, xc, n, n_queries, ref_calib);
      for (float g : clip_grid) {
        r2.layers[size_t(l)].k_clip = g;
        const double e = transformed_error(model, ls, r2, l, xc, n, n_queries, ref_calib);
        if (e < best) best = e, best_clip = g;
      }
      r2.layers[size_t(l)].k_clip = best_clip;
      out[i + 1].layer_error.push_back(transformed_error(
          model, ls, r2, l, apply_k_channel_transform(t, eval.layer(l), n, shape, rope), n, n_queries, ref_eval));
      out[i + 1].k_clip.push_back(best_clip);
      out[i + 1].predicted_gain.push_back(t.predicted_gain);
    }
  }
  return out;
}

}  // namespace oscar
