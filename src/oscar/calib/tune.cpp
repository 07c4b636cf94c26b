#include "oscar/calib/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <span>

#include "oscar/rotation/key_scale.h"
#include "oscar/core/clock.h"
#include "oscar/core/error.h"
#include "oscar/eval/kl_divergence.h"
#include "oscar/eval/kv_search.h"
#include "oscar/eval/paired_difference.h"
#include "oscar/ops/rope.h"

namespace oscar::calib {

namespace {
double mean(const std::vector<double>& xs) {
  double s = 0.0;
  for (double x : xs) s += x;
  return xs.empty() ? 0.0 : s / double(xs.size());
}
// Per layer: the query covariances per KV head and Σ (k − RoPE(b_k, p) − m)² per channel,
// over forward calls that each start at position 0.
class KeyScaleObserver : public ForwardObserver {
 public:
  KeyScaleObserver(const Transformer& t, const KvSpec& base, const RotationSet& rs) : t_(t), rope_(rope_freqs(t.config())) {
    const ModelConfig& c = t.config();
    for (int l = 0; l < c.n_layers; ++l) {
      acc_.emplace_back(c.n_heads, c.n_kv_heads, c.head_dim);
      k_sq_.emplace_back(size_t(c.n_kv_heads) * size_t(c.head_dim), 0.0);
      const float* m = layer_key_mean(base, &rs, l, c.n_kv_heads, c.head_dim);
      mean_.emplace_back(m ? std::vector<float>(m, m + int64_t(c.n_kv_heads) * c.head_dim) : std::vector<float>());
      split_.push_back(base.k_bias_split && !t.weights().layers[size_t(l)].bk.empty());
    }
    bias_rows_.resize(size_t(c.n_layers));
  }
  void on_attention_inputs(int layer, int64_t n, const float* q, const float* k, const float*) override {
    const ModelConfig& c = t_.config();
    const int64_t kvd = int64_t(c.n_kv_heads) * c.head_dim;
    acc_[size_t(layer)].add_pass1(q, nullptr, nullptr, n);
    std::vector<float>& rows = bias_rows_[size_t(layer)];
    if (split_[size_t(layer)] && int64_t(rows.size()) < n * kvd)
      append_rope_rows(rope_, t_.weights().layers[size_t(layer)].bk.data(), c.n_kv_heads, c.head_dim,
                       int64_t(rows.size()) / kvd, n, rows);
    const std::vector<float>& m = mean_[size_t(layer)];
    std::vector<double>& sq = k_sq_[size_t(layer)];
    for (int64_t i = 0; i < n * kvd; ++i) {
      const double x = double(k[i]) - (rows.empty() ? 0.0 : rows[size_t(i)]) - (m.empty() ? 0.0 : m[size_t(i % kvd)]);
      sq[size_t(i % kvd)] += x * x;
    }
  }
  const CovarianceAccumulator& queries(int l) const { return acc_[size_t(l)]; }
  const std::vector<double>& key_squares(int l) const { return k_sq_[size_t(l)]; }

 private:
  const Transformer& t_;
  RopeFreqs rope_;
  std::vector<CovarianceAccumulator> acc_;
  std::vector<std::vector<double>> k_sq_;      // per layer [n_kv·d]
  std::vector<std::vector<float>> mean_;       // per layer [n_kv·d] or empty
  std::vector<bool> split_;                    // per layer: RoPE(b_k, p) is not stored
  std::vector<std::vector<float>> bias_rows_;  // per layer [positions, n_kv, d] RoPE(b_k, p)
};

}  // namespace

nlohmann::json fit_key_scales(LoadedModel& m, const std::vector<int32_t>& ids, int64_t n, int64_t per_prompt,
                              const KvSpec& base, RotationSet& rs) {
  const ModelConfig& c = m.transformer->config();
  const auto [k_src, k_comp] = split_objective(rs.k_objective);
  if (k_src != "qqt")
    fail("--k-scale refits R_K on the scaled queries (a qqt_* K objective); these rotations' K objective is '{}'",
         rs.k_objective);
  n = std::min<int64_t>(n, int64_t(ids.size()));
  per_prompt = std::min(per_prompt, n);
  const int64_t prompts = per_prompt > 0 ? n / per_prompt : 0;
  if (prompts < 1 || per_prompt < 2) fail("--k-scale: {} calibration tokens are too few", n);
  const auto t0 = std::chrono::steady_clock::now();
  KeyScaleObserver obs(*m.transformer, base, rs);
  m.transformer->set_observer(&obs);
  {
    KvCache cache = m.transformer->make_cache(per_prompt);
    const SeqId seq = cache.add_sequence();
    std::vector<float> logits;
    for (int64_t p = 0; p < prompts; ++p) {
      cache.clear_sequence(seq);
      m.transformer->forward(cache, seq, std::span<const int32_t>(ids.data() + p * per_prompt, size_t(per_prompt)),
                             LogitsFor::last, logits);
      fmt::print(stderr, "\rk-scale: {}/{} prompts of {} tokens, {:.1f} s", p + 1, prompts, per_prompt, seconds_since(t0));
    }
    fmt::print(stderr, "\n");
  }
  m.transformer->set_observer(nullptr);
  nlohmann::json layers = nlohmann::json::array();
  std::vector<double> gains;
  for (int l = 0; l < c.n_layers; ++l) {
    const CovarianceAccumulator& acc = obs.queries(l);
    KeyScaleFit f = key_scale_from_moments(obs.key_squares(l), query_channel_moments(acc), c.n_kv_heads, c.head_dim);
    const FittedRotation fr = fit_rotation(scaled_query_covariance(acc, f.scale), k_comp);
    LayerRotation& lr = rs.layers[size_t(l)];
    lr.k_scale = std::move(f.scale);
    lr.k_rotation = fr.rotation;
    lr.k_eigenvalues = fr.eigenvalues;
    auto [lo, hi] = std::minmax_element(lr.k_scale.begin(), lr.k_scale.end());
    layers.push_back({{"layer", l}, {"predicted_gain", f.predicted_gain}, {"scale_min", *lo}, {"scale_max", *hi}});
    gains.push_back(f.predicted_gain);
  }
  fmt::print(stderr, "k-scale: fitted on {} tokens; predicted gain {:.3f} (mean over layers), R_K refitted ({:.1f} s)\n",
             prompts * per_prompt, mean(gains), seconds_since(t0));
  return {{"tokens", prompts * per_prompt}, {"prompts", prompts}, {"tokens_per_prompt", per_prompt},
          {"k_composition", k_comp}, {"mean_predicted_gain", mean(gains)}, {"layers", layers},
          {"seconds", seconds_since(t0)}};
}

namespace {
// q, k, v of one forward pass over ids, and the probe that measures formats on them.
struct RecordedProbe {
  std::unique_ptr<QkvRecorder> rec;
  std::unique_ptr<KvErrorProbe> probe;
};
RecordedProbe record_probe(LoadedModel& m, std::span<const int32_t> ids, int64_t queries) {
  const ModelConfig& c = m.transformer->config();
  RecordedProbe r;
  r.rec = std::make_unique<QkvRecorder>(c.n_layers, AttentionShape{c.n_heads, c.n_kv_heads, c.head_dim});
  m.transformer->set_observer(r.rec.get());
  {
    KvCache cache = m.transformer->make_cache(int64_t(ids.size()));
    const SeqId seq = cache.add_sequence();
    std::vector<float> logits;
    m.transformer->forward(cache, seq, ids, LogitsFor::last, logits);
  }
  m.transformer->set_observer(nullptr);
  r.probe = std::make_unique<KvErrorProbe>(*m.transformer, *r.rec, int64_t(ids.size()), queries);
  return r;
}

// --k-mean-check: the model's own next-token distributions over the probe with BF16 KV, with
// `base` and rs, and with `base` and rs less every key mean; the last `scored` positions are
// compared (KL to BF16 per position). Drops the key means from rs only when the model does
// better without them by more than kKeyMeanCheckZ standard errors of the paired difference:
// the key means are the default, and a difference inside the probe's noise keeps them.
// The model is left with a BF16 cache, as the searches found it (R_V is not absorbed).
constexpr int64_t kKeyMeanCheckBlock = 64;  // positions per block of the paired difference's error
constexpr double kKeyMeanCheckZ = 2.0;
nlohmann::json check_key_means_end_to_end(LoadedModel& m, std::span<const int32_t> ids, int64_t scored,
                                          const KvSpec& base, RotationSet& rs) {
  Transformer& t = *m.transformer;
  const int64_t n = int64_t(ids.size()), vocab = t.config().n_vocab;
  scored = std::clamp<int64_t>(scored, 1, n);
  auto run = [&](const KvSpec& spec, const RotationSet* r) {
    t.configure_kv(spec, r, /*absorb_v=*/false);
    KvCache cache = t.make_cache(n);
    const SeqId seq = cache.add_sequence();
    std::vector<float> logits;
    t.forward(cache, seq, ids, LogitsFor::all, logits);
    return std::vector<float>(logits.end() - scored * vocab, logits.end());
  };
  const std::vector<float> ref = run(KvSpec::parse("bf16"), nullptr);
  const std::vector<double> with = row_kl_divergences(ref, run(base, &rs), vocab);
  RotationSet without_means = rs;
  for (LayerRotation& l : without_means.layers) l.k_mean.clear();
  const std::vector<double> without = row_kl_divergences(ref, run(base, &without_means), vocab);
  t.configure_kv(KvSpec::parse("bf16"), nullptr, /*absorb_v=*/false);
  const PairedDifference d = paired_difference(without, with, kKeyMeanCheckBlock);  // < 0: better without
  const bool kept = !(d.mean < 0 && d.significant(kKeyMeanCheckZ));
  if (!kept)
    for (LayerRotation& l : rs.layers) l.k_mean.clear();
  const double kld_with = mean(with), kld_without = mean(without);
  fmt::print(stderr, "key-mean check: the model's KLD to BF16 KV on the probe's last {} positions: {:.5f} with the key "
             "means, {:.5f} without ({:+.5f} ± {:.5f}): {}\n", scored, kld_with, kld_without, d.mean,
             d.standard_error, kept ? "kept" : "dropped");
  return {{"scored_positions", scored}, {"kld_with", kld_with}, {"kld_without", kld_without},
          {"difference", d.mean}, {"difference_stderr", d.standard_error}, {"blocks", d.blocks},
          {"block_positions", kKeyMeanCheckBlock}, {"z", kKeyMeanCheckZ}, {"kept", kept}};
}

nlohmann::json clip_json(const std::vector<LayerClipChoice>& ch, const std::vector<float>& grid,
                         const std::vector<std::string>& probe_names, std::vector<double>& before,
                         std::vector<double>& after) {
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < ch.size(); ++l) {
    layers.push_back({{"layer", l}, {"k_clip", ch[l].k_clip}, {"v_clip", ch[l].v_clip},
                      {"error_before", ch[l].error_before}, {"error_after", ch[l].error_after}});
    if (!probe_names.empty()) layers.back()["probe_errors"] = ch[l].probe_errors;
    before.push_back(ch[l].error_before);
    after.push_back(ch[l].error_after);
  }
  nlohmann::json j = {{"grid", grid}, {"mean_error_before", mean(before)}, {"mean_error_after", mean(after)},
                      {"layers", layers}};
  if (!probe_names.empty()) j["objective"] = "worst", j["probes"] = probe_names;
  return j;
}
}  // namespace

nlohmann::json tune_rotations(LoadedModel& m, const std::vector<int32_t>& ids, int64_t probe_from, const KvSpec& base,
                              const TuneOptions& o, RotationSet& rs, std::span<const SourceProbe> source_probes) {
  const ModelConfig& c = m.transformer->config();
  const int64_t cap = c.n_ctx_train > 0 ? std::min<int64_t>(o.probe_tokens, c.n_ctx_train) : o.probe_tokens;
  const int64_t windows = int64_t(base.sink) + base.recent;
  if (o.k_mean_search && !base.k_mean)
    fail("--k-mean-search chooses among the key means; it cannot run with --no-k-mean");
  if (o.k_mean_check && !base.k_mean)
    fail("--k-mean-check compares the model with and without key means; it cannot run with --no-k-mean");
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::json out = nlohmann::json::object();

  // --clip-objective worst: one probe per calibration source.
  std::vector<RecordedProbe> per_source;
  std::vector<std::string> per_source_names;
  if (o.worst_case()) {
    if (source_probes.empty()) fail("--clip-objective worst needs the calibration sources' own probe text");
    if (o.probe_queries < 1) fail("--probe-queries must be at least 1");
    for (const SourceProbe& sp : source_probes) {
      const int64_t n = std::min<int64_t>(cap, int64_t(sp.ids.size()));
      if (n <= windows) {
        fmt::print(stderr, "note: worst-case clip search: '{}' leaves {} probe tokens, not past the BF16 windows ({}); "
                   "left out\n", sp.name, n, windows);
        continue;
      }
      per_source.push_back(record_probe(m, std::span<const int32_t>(sp.ids.data(), size_t(n)),
                                        std::min<int64_t>(o.probe_queries, n)));
      per_source_names.push_back(sp.name);
      fmt::print(stderr, "\rsearches: recorded {} of {} source probes ({} tokens each at most), {:.1f} s",
                 per_source.size(), source_probes.size(), cap, seconds_since(t0));
    }
    fmt::print(stderr, "\n");
    if (per_source.empty()) fail("--clip-objective worst: no calibration source leaves a probe past the BF16 windows");
  }

  // The mixed probe: the budget search, the per-layer searches unless they run per source
  // (these record its q, k, v), and --k-mean-check (which runs the model over its tokens).
  const bool record_mixed = o.kv_budget || ((o.clip() || o.k_mean_search) && !o.worst_case());
  std::optional<RecordedProbe> mixed;
  int64_t n = cap;
  if (record_mixed || o.k_mean_check) {
    if (n > int64_t(ids.size())) {
      fmt::print(stderr, "note: the calibration text has only {} tokens; the searches use them all, not {}\n",
                 ids.size(), n);
      n = int64_t(ids.size());
    }
    if (n <= windows) {
      if (!o.requested()) {
        fmt::print(stderr, "note: clip search skipped: {} probe tokens do not reach past the BF16 windows ({} + {})\n",
                   n, base.sink, base.recent);
        return nullptr;
      }
      fail("--probe-tokens {} must exceed the BF16 windows ({} + {} tokens) to measure the quantized history", n,
           base.sink, base.recent);
    }
    if (o.probe_queries < 1 || o.probe_queries > n) fail("--probe-queries must be in [1, {}]", n);
    if (probe_from + n > int64_t(ids.size())) {
      fmt::print(stderr,
                 "note: only {} calibration tokens follow the fitted ones; the searches reuse the text's first {}\n",
                 int64_t(ids.size()) - probe_from, n);
      probe_from = 0;
    }
    if (record_mixed)
      mixed = record_probe(m, std::span<const int32_t>(ids.data() + probe_from, size_t(n)), o.probe_queries);
    fmt::print(stderr, "searches: {} probe tokens (from token {}), last {} queries, base {}\n", n, probe_from,
               o.probe_queries, base.name());
    out["probe_tokens"] = n;
    out["probe_from"] = probe_from;
    out["probe_queries"] = o.probe_queries;
  }

  std::vector<const KvErrorProbe*> probes;  // what the key-mean and clip searches measure on
  if (o.worst_case())
    for (const RecordedProbe& r : per_source) probes.push_back(r.probe.get());
  else if (mixed)
    probes.push_back(mixed->probe.get());

  if (o.k_mean_search) {  // before the clips, which are then searched for the keys as stored
    const std::vector<LayerKeyMeanChoice> ch = choose_key_means(probes, base, rs);
    nlohmann::json layers = nlohmann::json::array();
    std::vector<int> kept;
    for (size_t l = 0; l < ch.size(); ++l) {
      layers.push_back({{"layer", l}, {"kept", ch[l].kept}, {"error_with", ch[l].error_with},
                        {"error_without", ch[l].error_without}});
      if (ch[l].kept) kept.push_back(int(l));
    }
    fmt::print(stderr, "key-mean search: {} of {} layers keep their key mean ({:.1f} s so far)\n", kept.size(),
               ch.size(), seconds_since(t0));
    out["k_mean_search"] = {{"kept_layers", kept}, {"layers", layers}};
    if (o.worst_case()) out["k_mean_search"]["probes"] = per_source_names;
  }

  if (o.clip()) {
    const std::vector<float> grid = default_clip_grid();
    const std::vector<LayerClipChoice> ch = search_clip_ratios(probes, base, rs, grid);
    std::vector<double> before, after;
    out["clip_search"] = clip_json(ch, grid, per_source_names, before, after);
    fmt::print(stderr, "clip search{}: mean attention-output error {:.4f} -> {:.4f} ({:.1f} s so far)\n",
               o.worst_case() ? fmt::format(" (worst of {} sources)", probes.size()) : "", mean(before), mean(after),
               seconds_since(t0));
  }

  if (o.k_mean_check) {  // after the clips, which were searched with the key means
    const std::span<const int32_t> probe_ids(ids.data() + probe_from, size_t(n));
    out["k_mean_check"] = check_key_means_end_to_end(m, probe_ids, n - windows, base, rs);
  }

  if (o.kv_budget) {
    const LayerTypeChoice ch = choose_kv_layer_types(*mixed->probe, base, rs, o.budget_types, *o.kv_budget);
    rs.kv_layers = ch.kv_layers;
    rs.kv_budget_bits = *o.kv_budget;
    nlohmann::json layers = nlohmann::json::array();
    std::vector<double> base_err, chosen_err;
    for (size_t l = 0; l < ch.pick.size(); ++l) {
      nlohmann::json errors = nlohmann::json::object(), bits = nlohmann::json::object();
      for (const LayerTypeCandidate& cand : ch.candidates[l]) errors[cand.type] = cand.error, bits[cand.type] = cand.bits;
      const LayerTypeCandidate& pick = ch.candidates[l][size_t(ch.pick[l])];
      layers.push_back({{"layer", l}, {"type", pick.type}, {"error", errors}, {"history_bits", bits}});
      base_err.push_back(ch.candidates[l][0].error);
      chosen_err.push_back(pick.error);
    }
    fmt::print(stderr, "kv budget {:.3f} bits: {} ({:.3f} history bits per element; mean error {:.4f} -> {:.4f})\n",
               *o.kv_budget, ch.kv_layers.empty() ? std::string("every layer ") + base.mode : ch.kv_layers,
               ch.mean_history_bits, mean(base_err), mean(chosen_err));
    out["kv_budget"] = {{"budget_bits", *o.kv_budget}, {"base", base.mode}, {"types", o.budget_types},
                        {"kv_layers", ch.kv_layers}, {"mean_history_bits", ch.mean_history_bits},
                        {"mean_error_base", mean(base_err)}, {"mean_error_chosen", mean(chosen_err)}, {"layers", layers}};
  }
  out["seconds"] = seconds_since(t0);
  return out;
}

}  // namespace oscar::calib
