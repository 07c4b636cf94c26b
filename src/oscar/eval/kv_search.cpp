#include "oscar/eval/kv_search.h"

#include <fmt/format.h>

#include <algorithm>

#include "oscar/core/error.h"

namespace oscar {

std::vector<float> default_clip_grid() {
  return {1.0f, 0.99f, 0.98f, 0.97f, 0.96f, 0.95f, 0.94f, 0.93f, 0.92f, 0.90f, 0.88f, 0.85f, 0.80f, 0.75f, 0.70f, 0.65f, 0.60f};
}

std::vector<LayerClipChoice> search_clip_ratios(const KvErrorProbe& probe, const KvSpec& spec, RotationSet& rs,
                                                std::span<const float> grid) {
  const KvErrorProbe* const one[] = {&probe};
  std::vector<LayerClipChoice> out = search_clip_ratios(one, spec, rs, grid);
  for (LayerClipChoice& c : out) c.probe_errors.clear();  // one probe: error_after says it
  return out;
}

namespace {
double worst_error(std::span<const KvErrorProbe* const> probes, const KvSpec& spec, const RotationSet& rs, int l,
                   std::vector<double>* each = nullptr) {
  double w = 0.0;
  if (each) each->clear();
  for (const KvErrorProbe* p : probes) {
    const double e = p->layer(spec, &rs, l).error;
    w = std::max(w, e);
    if (each) each->push_back(e);
  }
  return w;
}
}  // namespace

std::vector<LayerKeyMeanChoice> choose_key_means(std::span<const KvErrorProbe* const> probes, const KvSpec& spec,
                                                 RotationSet& rs) {
  const int n_layers = int(rs.layers.size());
  OSCAR_CHECK(!probes.empty(), "key-mean search without a probe");
  if (!spec.uses_rotation(KvRotation::calibrated, n_layers) || spec.mixed() || !spec.k_mean)
    fail("the key-mean search needs a uniform calibrated KV type with key centring on, got '{}'", spec.name());
  std::vector<LayerKeyMeanChoice> out;
  for (int l = 0; l < n_layers; ++l) {
    LayerRotation& lr = rs.layers[size_t(l)];
    LayerKeyMeanChoice c;
    if (lr.k_mean.empty()) {
      c.kept = false;
      c.error_with = c.error_without = worst_error(probes, spec, rs, l);
    } else {
      c.error_with = worst_error(probes, spec, rs, l);
      std::vector<float> mean = std::move(lr.k_mean);
      lr.k_mean.clear();
      c.error_without = worst_error(probes, spec, rs, l);
      c.kept = c.error_with <= c.error_without;
      if (c.kept) lr.k_mean = std::move(mean);
    }
    out.push_back(c);
  }
  return out;
}

std::vector<LayerClipChoice> search_clip_ratios(std::span<const KvErrorProbe* const> probes, const KvSpec& spec,
                                                RotationSet& rs, std::span<const float> grid) {
  const int n_layers = int(rs.layers.size());
  OSCAR_CHECK(!probes.empty(), "clip search without a probe");
  if (!spec.uses_rotation(KvRotation::calibrated, n_layers) || spec.mixed())
    fail("clip search needs a uniform calibrated KV type (int2-oscar*), got '{}'", spec.name());
  std::vector<LayerClipChoice> out;
  std::vector<double> each;
  for (int l = 0; l < n_layers; ++l) {
    LayerRotation& lr = rs.layers[size_t(l)];
    LayerClipChoice c;
    c.error_before = worst_error(probes, spec, rs, l, &c.probe_errors);
    double best = c.error_before;
    for (float* clip : {&lr.k_clip, &lr.v_clip}) {
      const float keep = *clip;
      float best_clip = keep;
      for (float g : grid) {
        if (g == keep) continue;
        *clip = g;
        const double e = worst_error(probes, spec, rs, l, &each);
        if (e < best) best = e, best_clip = g, c.probe_errors = each;
      }
      *clip = best_clip;
    }
    c.k_clip = lr.k_clip;
    c.v_clip = lr.v_clip;
    c.error_after = best;
    out.push_back(c);
  }
  return out;
}

LayerTypeChoice choose_kv_layer_types(const KvErrorProbe& probe, const KvSpec& base, const RotationSet& rs,
                                      const std::vector<std::string>& types, double budget_bits) {
  const int n_layers = int(rs.layers.size());
  if (base.mixed()) fail("--kv-budget: the base KV type must be uniform, got '{}'", base.name());
  LayerTypeChoice r;
  r.candidates.resize(size_t(n_layers));
  for (int l = 0; l < n_layers; ++l) {
    const KvErrorProbe::LayerResult m = probe.layer(base, &rs, l);
    r.candidates[size_t(l)].push_back({base.mode, m.history_bits, m.error});
  }
  for (const std::string& type : types) {
    KvSpec s = base;
    for (int l = 0; l < n_layers; ++l) {
      s.layer_types = parse_kv_layers(fmt::format("{}:{}", l, type), n_layers);
      s.validate();
      const KvErrorProbe::LayerResult m = probe.layer(s, &rs, l);
      r.candidates[size_t(l)].push_back({type, m.history_bits, m.error});
    }
  }
  r.pick = choose_layer_types(r.candidates, budget_bits);
  std::vector<std::string> chosen;
  for (int l = 0; l < n_layers; ++l) {
    const LayerTypeCandidate& c = r.candidates[size_t(l)][size_t(r.pick[size_t(l)])];
    chosen.push_back(c.type);
    r.mean_history_bits += c.bits / n_layers;
  }
  r.kv_layers = kv_layers_string(chosen, base.mode);
  return r;
}

}  // namespace oscar
