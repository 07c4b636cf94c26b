#include "calibrate_tune.h"

#include <fmt/format.h>

#include "oscar/core/error.h"
#include "oscar/eval/kv_search.h"

namespace oscar::cli {

namespace {
double mean(const std::vector<double>& xs) {
  double s = 0.0;
  for (double x : xs) s += x;
  return xs.empty() ? 0.0 : s / double(xs.size());
}
}  // namespace

void add_tune_options(CLI::App& cmd, TuneOptions& o, bool clip_default) {
  o.clip_search_default = clip_default;
  auto* on = cmd.add_flag("--clip-search", o.clip_search,
                          clip_default ? "choose each layer's K and V clip ratio by the attention-output error on "
                                         "held-back calibration text (the default)"
                                       : "choose each layer's K and V clip ratio by the attention-output error on "
                                         "calibration text");
  if (clip_default)
    cmd.add_flag("--no-clip-search", o.no_clip_search, "keep the reference's clip ratios (K 0.96, V 0.92) in every layer")
        ->excludes(on);
  cmd.add_option("--kv-budget", o.kv_budget,
                 "choose per-layer KV types (int2-oscar, or an upgrade from --kv-budget-types) whose mean history "
                 "bits per element stay within BITS; stored with the rotations and used by --kv int2-oscar*")
      ->check(CLI::Range(0.0, 32.0));
  cmd.add_option("--kv-budget-types", o.budget_types, "the upgrades --kv-budget may choose (default int4,int8)")
      ->delimiter(',');
  cmd.add_option("--probe-tokens", o.probe_tokens,
                 "calibration tokens (after the fitted ones) the searches measure on (default 2048)")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 24));
  cmd.add_option("--probe-queries", o.probe_queries, "last positions whose attention output is scored (default 256)");
}

std::string tune_base_kv(const ModelOptions& o) { return o.kv == "bf16" ? "int2-oscar" : o.kv; }

KvSpec tune_base_spec(const ModelOptions& o, int group, int sink, int recent, int head_dim) {
  ModelOptions b = o;
  b.kv = tune_base_kv(o);
  b.kv_layers.reset();
  KvSpec s = kv_spec_from(b);
  if (s.rotation != KvRotation::calibrated)
    fail("--clip-search / --kv-budget tune an OSCAR KV type (--kv int2-oscar*), not '{}'", s.mode);
  s.group = std::min(group, head_dim), s.sink = sink, s.recent = recent;
  s.validate();
  return s;
}

nlohmann::json tune_rotations(LoadedModel& m, const std::vector<int32_t>& ids, int64_t probe_from, const KvSpec& base,
                              const TuneOptions& o, RotationSet& rs) {
  const ModelConfig& c = m.transformer->config();
  int64_t n = o.probe_tokens;
  if (c.n_ctx_train > 0) n = std::min<int64_t>(n, c.n_ctx_train);
  if (n > int64_t(ids.size())) {
    fmt::print(stderr, "note: the calibration text has only {} tokens; the searches use them all, not {}\n",
               ids.size(), n);
    n = int64_t(ids.size());
  }
  if (n <= int64_t(base.sink) + base.recent) {
    if (!o.requested()) {
      fmt::print(stderr, "note: clip search skipped: {} probe tokens do not reach past the BF16 windows ({} + {})\n", n,
                 base.sink, base.recent);
      return nullptr;
    }
    fail("--probe-tokens {} must exceed the BF16 windows ({} + {} tokens) to measure the quantized history", n,
         base.sink, base.recent);
  }
  if (o.probe_queries < 1 || o.probe_queries > n) fail("--probe-queries must be in [1, {}]", n);
  if (probe_from + n > int64_t(ids.size())) {
    fmt::print(stderr, "note: only {} calibration tokens follow the fitted ones; the searches reuse the text's first {}\n",
               int64_t(ids.size()) - probe_from, n);
    probe_from = 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  QkvRecorder rec(c.n_layers, AttentionShape{c.n_heads, c.n_kv_heads, c.head_dim});
  m.transformer->set_observer(&rec);
  {
    KvCache cache = m.transformer->make_cache(n);
    const SeqId seq = cache.add_sequence();
    std::vector<float> logits;
    m.transformer->forward(cache, seq, std::span<const int32_t>(ids.data() + probe_from, size_t(n)), LogitsFor::last,
                           logits);
  }
  m.transformer->set_observer(nullptr);
  const KvErrorProbe probe(*m.transformer, rec, n, o.probe_queries);
  fmt::print(stderr, "searches: {} probe tokens (from token {}), last {} queries, base {}\n", n, probe_from,
             o.probe_queries, base.name());
  nlohmann::json out = nlohmann::json::object();

  if (o.clip()) {
    const std::vector<float> grid = default_clip_grid();
    const std::vector<LayerClipChoice> ch = search_clip_ratios(probe, base, rs, grid);
    nlohmann::json layers = nlohmann::json::array();
    std::vector<double> before, after;
    for (size_t l = 0; l < ch.size(); ++l) {
      layers.push_back({{"layer", l}, {"k_clip", ch[l].k_clip}, {"v_clip", ch[l].v_clip},
                        {"error_before", ch[l].error_before}, {"error_after", ch[l].error_after}});
      before.push_back(ch[l].error_before);
      after.push_back(ch[l].error_after);
    }
    fmt::print(stderr, "clip search: mean attention-output error {:.4f} -> {:.4f} ({:.1f} s so far)\n", mean(before),
               mean(after), seconds_since(t0));
    out["clip_search"] = {{"grid", grid}, {"mean_error_before", mean(before)}, {"mean_error_after", mean(after)},
                          {"layers", layers}};
  }

  if (o.kv_budget) {
    const LayerTypeChoice ch = choose_kv_layer_types(probe, base, rs, o.budget_types, *o.kv_budget);
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
  out["probe_tokens"] = n;
  out["probe_from"] = probe_from;
  out["probe_queries"] = o.probe_queries;
  out["seconds"] = seconds_since(t0);
  return out;
}

}  // namespace oscar::cli
