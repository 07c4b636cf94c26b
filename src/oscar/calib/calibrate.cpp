#include "oscar/calib/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "oscar/core/clock.h"
#include "oscar/core/error.h"
#include "oscar/ops/rope.h"
#include "oscar/rotation/key_mean.h"
#include "oscar/rotation/rotation_fit.h"

namespace oscar::calib {

namespace {

// Pass 1: feeds each layer's q, k, v to its accumulator and keeps k and v, so that
// pass 2 (which needs the final C_Q,h) replays them instead of running the model
// again: the same inputs at half the cost, for tokens · layers · 2 · kv_dim floats.
// Under --pool equal each source has its own accumulators ([source][layer]); set_source
// says whose prompt runs next.
class CovarianceObserver : public ForwardObserver {
 public:
  CovarianceObserver(std::vector<std::vector<CovarianceAccumulator>>& acc, bool keep_kv)
      : acc_(acc), keep_kv_(keep_kv), k_(acc.size()), v_(acc.size()), k_sum_(acc[0].size()) {
    for (size_t s = 0; s < acc.size(); ++s) k_[s].resize(acc[s].size()), v_[s].resize(acc[s].size());
  }
  void set_source(size_t s) { source_ = std::min(s, acc_.size() - 1); }
  void on_attention_inputs(int layer, int64_t n, const float* q, const float* k, const float* v) override {
    CovarianceAccumulator& a = acc_[source_][size_t(layer)];
    a.add_pass1(q, k, v, n);
    const int64_t kvd = int64_t(a.n_kv_heads) * a.head_dim;
    std::vector<double>& sum = k_sum_[size_t(layer)];
    sum.resize(size_t(kvd), 0.0);
    for (int64_t i = 0; i < n * kvd; ++i) sum[size_t(i % kvd)] += k[i];
    if (keep_kv_) {
      const int64_t len = n * a.n_kv_heads * a.head_dim;
      k_[source_][size_t(layer)].insert(k_[source_][size_t(layer)].end(), k, k + len);
      v_[source_][size_t(layer)].insert(v_[source_][size_t(layer)].end(), v, v + len);
    }
  }
  // Σ over the calibration tokens of the post-RoPE key, per layer [n_kv_heads · d].
  const std::vector<double>& key_sum(int layer) const { return k_sum_[size_t(layer)]; }
  void replay_pass2() {
    for (size_t s = 0; s < acc_.size(); ++s)
      for (size_t l = 0; l < acc_[s].size(); ++l) {
        CovarianceAccumulator& a = acc_[s][l];
        const int64_t n = int64_t(k_[s][l].size()) / (int64_t(a.n_kv_heads) * a.head_dim);
        a.add_pass2(k_[s][l].data(), v_[s][l].data(), n);
        std::vector<float>().swap(k_[s][l]);
        std::vector<float>().swap(v_[s][l]);
      }
  }

 private:
  std::vector<std::vector<CovarianceAccumulator>>& acc_;
  bool keep_kv_;
  size_t source_ = 0;
  std::vector<std::vector<std::vector<float>>> k_, v_;  // per source, layer [tokens, n_kv_heads, head_dim]
  std::vector<std::vector<double>> k_sum_;
};

// Each source's tokens the fit did not see (after its first window, as the mixed probe),
// for the worst-case clip search: at most `n` each.
std::vector<SourceProbe> own_probes(const std::vector<CalibSource>& sources, const std::vector<SourceTokens>& toks,
                                    const CalibMix& mix, int64_t n) {
  std::vector<SourceProbe> out;
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::vector<int32_t>& t = toks[i].ids;
    const CalibSourceUse& u = mix.use[i];
    const int64_t total = int64_t(t.size());
    const int64_t from = sources.size() == 1 ? u.tokens : u.starts[0] + mix.per_prompt;
    const int64_t limit = sources.size() > 1 && u.starts.size() > 1 ? u.starts[1] : total;
    const int64_t to = std::max(from, std::min(from + n, limit));
    out.push_back({sources[i].domain.empty() ? sources[i].path : sources[i].domain,
                   std::vector<int32_t>(t.begin() + from, t.begin() + to)});
  }
  return out;
}

// A layer's objective: the one accumulator's, or under --pool equal the sources' objectives
// each scaled to unit trace and averaged by weight (pool_covariances).
Eigen::MatrixXd layer_objective(const std::vector<std::vector<CovarianceAccumulator>>& acc, int l,
                                const std::string& name, const std::vector<double>& weights) {
  if (acc.size() == 1) return acc[0][size_t(l)].objective(name);
  std::vector<Eigen::MatrixXd> each;
  for (const auto& per_layer : acc) each.push_back(per_layer[size_t(l)].objective(name));
  return pool_covariances(each, weights);
}

void progress(const char* what, int done, int total, double secs) {
  const int width = 30, filled = total ? width * done / total : width;
  fmt::print(stderr, "\r{} [{}{}] {}/{} prompts, {:.1f} s", what, std::string(size_t(filled), '#'),
             std::string(size_t(width - filled), '.'), done, total, secs);
  if (done == total) fmt::print(stderr, "\n");
}

}  // namespace

void check_options(const CalibrationOptions& o) {
  for (const std::string* obj : {&o.k_objective, &o.v_objective}) split_objective(*obj);  // validates names
  if (o.prompts <= 0 || o.tokens < o.prompts) fail("--tokens {} must be at least --prompts {}", o.tokens, o.prompts);
}

Calibration calibrate(LoadedModel& m, const std::vector<CalibSource>& sources, const CalibrationOptions& o) {
  const auto t_start = std::chrono::steady_clock::now();
  check_options(o);
  if (sources.empty()) fail("calibration needs at least one source");
  const TuneOptions& tune = o.tune;
  const ModelConfig& c = m.transformer->config();
  const auto t_tok = std::chrono::steady_clock::now();
  std::vector<SourceTokens> toks;
  for (const CalibSource& s : sources)
    toks.push_back(tokenize_calib_source(*m.tokenizer, m.chat_template, m.default_system, s.path));
  const double tokenize_s = seconds_since(t_tok);
  // The searches probe tokens the fit did not see; with several sources, a share of each.
  const int64_t probe_tokens =
      tune.any() ? (c.n_ctx_train > 0 ? std::min<int64_t>(tune.probe_tokens, c.n_ctx_train) : tune.probe_tokens) : 0;
  // Pieces sized so that the scored queries hold one piece of every source.
  const int64_t probe_piece = std::max<int64_t>(16, tune.probe_queries / int64_t(sources.size()));
  const CalibMix mix = mix_calib_sources(sources, toks, o.tokens, o.prompts, probe_tokens, probe_piece);
  const std::vector<int32_t>& ids = mix.ids;
  const int64_t per_prompt = mix.per_prompt;
  nlohmann::json source_log = nlohmann::json::array();
  for (size_t i = 0; i < sources.size(); ++i) {
    const CalibSourceUse& u = mix.use[i];
    source_log.push_back({{"path", sources[i].path},
                          {"sha256", file_sha256(sources[i].path)},
                          {"weight", sources[i].weight},
                          {"domain", sources[i].domain},
                          {"format", toks[i].doc_starts.empty() ? "text" : "chat_jsonl"},
                          {"source_tokens", toks[i].ids.size()},
                          {"tokens", u.tokens},
                          {"prompts", u.prompts},
                          {"window_starts", u.starts},
                          {"probe_tokens", u.probe_tokens}});
    if (!toks[i].doc_starts.empty()) {
      source_log.back()["conversations"] = toks[i].doc_starts.size();
      source_log.back()["chat_template"] = m.chat_template == ChatTemplateKind::chatml ? "chatml"
                                           : m.chat_template == ChatTemplateKind::llama3 ? "llama3"
                                                                                         : "none (contents joined)";
    }
  }
  const std::string& text_desc = o.text_desc;
  fmt::print(stderr, "calibrating {} on {} tokens ({} prompts of {}) from {}\n", c.name, per_prompt * o.prompts,
             o.prompts, per_prompt, text_desc);
  if (sources.size() > 1) {
    int64_t all = 0;
    for (const SourceTokens& t : toks) all += int64_t(t.ids.size());
    fmt::print(stderr, "  (tokenized {} sources, {} tokens, in {:.1f} s)\n", sources.size(), all, tokenize_s);
  }
  if (sources.size() > 1)
    for (size_t i = 0; i < sources.size(); ++i)
      fmt::print(stderr, "  {:5.1f} %  {} prompts, {} tokens (+{} probe) from {}{}\n",
                 100.0 * double(mix.use[i].tokens) / double(per_prompt * o.prompts), mix.use[i].prompts,
                 mix.use[i].tokens, mix.use[i].probe_tokens, sources[i].path,
                 toks[i].doc_starts.empty() ? "" : " (through the chat template)");

  // --pool equal: one set of accumulators per source; else one for all.
  const size_t pools = o.pool == "equal" ? sources.size() : 1;
  std::vector<std::vector<CovarianceAccumulator>> acc(pools);
  for (auto& per_layer : acc)
    for (int l = 0; l < c.n_layers; ++l) per_layer.emplace_back(c.n_heads, c.n_kv_heads, c.head_dim);
  std::vector<size_t> prompt_source;  // the source of each prompt (mix.ids holds them source by source)
  for (size_t i = 0; i < sources.size(); ++i) prompt_source.insert(prompt_source.end(), size_t(mix.use[i].prompts), i);
  const bool need_pass2 = split_objective(o.v_objective).first == "sst" || split_objective(o.k_objective).first == "sst";
  CovarianceObserver obs(acc, need_pass2);
  m.transformer->set_observer(&obs);
  KvCache cache = m.transformer->make_cache(per_prompt);
  const SeqId seq = cache.add_sequence();
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  for (int p = 0; p < o.prompts; ++p) {
    cache.clear_sequence(seq);
    obs.set_source(size_t(p) < prompt_source.size() ? prompt_source[size_t(p)] : 0);
    const std::span<const int32_t> prompt(ids.data() + int64_t(p) * per_prompt, size_t(per_prompt));
    m.transformer->forward(cache, seq, prompt, LogitsFor::last, logits);
    progress("forward (q, k, v)", p + 1, o.prompts, seconds_since(t0));
  }
  m.transformer->set_observer(nullptr);
  for (auto& per_layer : acc)
    for (auto& a : per_layer) a.freeze_query_covariance();
  if (need_pass2) {
    const auto t1 = std::chrono::steady_clock::now();
    obs.replay_pass2();
    fmt::print(stderr, "pass 2 (score-weighted values) from the kept K/V in {:.1f} s\n", seconds_since(t1));
  }

  RotationSet rs;
  rs.head_dim = c.head_dim;
  rs.group_size = std::min(o.group, c.head_dim);
  rs.sink_tokens = o.sink;
  rs.recent_tokens = o.recent;
  rs.k_objective = o.k_objective;
  rs.v_objective = o.v_objective;
  std::vector<double> pool_weights;
  for (size_t i = 0; i < pools; ++i) pool_weights.push_back(sources[i].weight);
  nlohmann::json spectra = nlohmann::json::array();
  const RopeFreqs rope = rope_freqs(c);  // for the key means (--k-mean)
  for (int l = 0; l < c.n_layers; ++l) {
    const auto [k_src, k_comp] = split_objective(o.k_objective);
    const auto [v_src, v_comp] = split_objective(o.v_objective);
    const FittedRotation fk = fit_rotation(layer_objective(acc, l, k_src, pool_weights), k_comp);
    const FittedRotation fv = fit_rotation(layer_objective(acc, l, v_src, pool_weights), v_comp);
    LayerRotation lr;
    lr.layer = l;
    lr.k_rotation = fk.rotation;
    lr.v_rotation = fv.rotation;
    lr.k_eigenvalues = fk.eigenvalues;
    lr.v_eigenvalues = fv.eigenvalues;
    lr.k_clip = o.k_clip;
    lr.v_clip = o.v_clip;
    lr.k_mean = key_mean_after_split(obs.key_sum(l), per_prompt, o.prompts, rope,
                                     m.transformer->weights().layers[size_t(l)].bk, c.n_kv_heads, c.head_dim);
    rs.layers.push_back(std::move(lr));
    spectra.push_back({{"layer", l}, {"k", fk.eigenvalues}, {"v", fv.eigenvalues}});
  }
  rs.validate();
  const KvSpec& base = o.base;
  nlohmann::json k_scale_fit;
  if (o.k_scale) {  // a second forward pass: the scale needs the centred keys' moments
    k_scale_fit = fit_key_scales(m, ids, per_prompt * o.prompts, per_prompt, base, rs);
    rs.validate();
  }
  nlohmann::json tuned;
  if (tune.any()) {
    std::vector<SourceProbe> source_probes;
    if (tune.worst_case()) source_probes = own_probes(sources, toks, mix, tune.probe_tokens);
    tuned = tune_rotations(m, ids, per_prompt * o.prompts, base, tune, rs, source_probes);
    rs.validate();
  }
  nlohmann::json extra = {{"model", c.name},
                          {"calibration_text", text_desc},
                          {"calibration_sources", source_log},
                          {"tokens", per_prompt * o.prompts},
                          {"pool", o.pool},
                          {"prompts", o.prompts},
                          {"tokens_per_prompt", per_prompt},
                          {"eigenvalue_spectra", spectra},
                          {"seconds", seconds_since(t_start)}};
  if (!tuned.is_null()) extra["searches"] = tuned;
  if (!k_scale_fit.is_null()) extra["k_scale_fit"] = k_scale_fit;
  return {std::move(rs), std::move(extra)};
}

}  // namespace oscar::calib
