// oscar calibrate: stream a model over calibration text, accumulate the attention-aware
// covariances per layer in float64 (pass 1: Σ_Q, Σ_K, Σ_V; pass 2: score-weighted Σ_V
// with the frozen C_Q,h), fit R = eigvec · Hadamard · bit-reversal permutation, and write
// RotationZoo files plus a JSON manifest. The text is one file, several (`-f PATH[:WEIGHT]`,
// mixed in proportion to the weights) or the multi-domain corpus (`--corpus`, the default).
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "calibrate_tune.h"
#include "commands.h"
#include "common.h"
#include "oscar/calib/key_mean.h"
#include "oscar/calib/rotation_fit.h"
#include "oscar/core/error.h"
#include "oscar/eval/calib_sources.h"
#include "oscar/kv/rotation_io.h"
#include "oscar/ops/rope.h"

namespace oscar::cli {

namespace {
struct CalibrateOptions {
  ModelOptions model;
  std::vector<std::string> text_files;  // -f PATH[:WEIGHT], repeatable
  std::string corpus_dir;               // --corpus DIR
  std::string out_dir;
  int64_t tokens = 20000;
  int prompts = 40;
  int group = 128;
  int sink = 64, recent = 256;
  std::string pool = "tokens";  // --pool
  std::string k_objective = "qqt_r_h_pbr";
  std::string v_objective = "sst_r_h_pbr";
  TuneOptions tune;
};

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

// $OSCAR_CORPUS_DIR, else $OSCAR_CACHE/data/corpus, else ~/.cache/oscar/data/corpus (as scripts/env.sh).
std::string default_corpus_dir() {
  if (const char* d = std::getenv("OSCAR_CORPUS_DIR"); d && *d) return d;
  if (const char* c = std::getenv("OSCAR_CACHE"); c && *c) return std::string(c) + "/data/corpus";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/oscar/data/corpus";
}

// The sources -f and --corpus name; with neither, the default corpus (which must exist).
std::vector<CalibSource> calibration_sources(const CalibrateOptions& o, std::string& corpus_used) {
  std::vector<CalibSource> out;
  corpus_used = o.corpus_dir;
  if (o.text_files.empty() && o.corpus_dir.empty()) {
    corpus_used = default_corpus_dir();
    if (!std::filesystem::is_regular_file(std::filesystem::path(corpus_used) / "manifest.json"))
      fail("no -f and no calibration corpus at '{}' (the default): install it with `bash scripts/fetch-corpus.sh`, "
           "or give --corpus DIR or -f FILE",
           corpus_used);
  }
  if (!corpus_used.empty()) {
    out = corpus_calib_sources(corpus_used);
    for (const CalibSource& s : out) {
      const std::string want = corpus_manifest_sha256(corpus_used, s.path);
      if (!want.empty() && file_sha256(s.path) != want)
        fmt::print(stderr, "note: '{}' differs from the sha256 in its corpus manifest (edited? `bash "
                   "scripts/fetch-corpus.sh --verify` checks)\n", s.path);
    }
  }
  for (const std::string& f : o.text_files) out.push_back(parse_calib_source(f));
  return out;
}

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

int calibrate(const CalibrateOptions& o) {
  const auto t_start = std::chrono::steady_clock::now();
  for (const std::string* obj : {&o.k_objective, &o.v_objective}) split_objective(*obj);  // validates names
  if (o.prompts <= 0 || o.tokens < o.prompts) fail("--tokens {} must be at least --prompts {}", o.tokens, o.prompts);
  std::string corpus;
  const std::vector<CalibSource> sources = calibration_sources(o, corpus);
  // Flags first: fail before the slow part. The default-on clip search only tunes OSCAR types.
  TuneOptions tune = o.tune;
  if (tune.requested() || o.model.k_scale) tune_base_spec(o.model, o.group, o.sink, o.recent, o.group);
  else if (tune.any() && KvSpec::parse(tune_base_kv(o.model)).rotation != KvRotation::calibrated)
    tune.clip_search_default = false;
  ModelOptions mo = o.model;
  mo.kv = "bf16";  // calibration sees the model's own (unquantized) attention inputs
  mo.kv_layers.reset();
  mo.k_scale = false;
  mo.k_clip.reset();
  mo.v_clip.reset();
  LoadedModel m = load_model(mo);
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
  const std::string text_desc = sources.size() == 1 ? sources[0].path
                                : !corpus.empty() && o.text_files.empty()
                                    ? "corpus " + corpus
                                    : fmt::format("{} sources", sources.size());
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
    lr.k_clip = o.model.k_clip.value_or(0.96f);  // --k-clip / --v-clip; the published recipe by default
    lr.v_clip = o.model.v_clip.value_or(0.92f);
    lr.k_mean = key_mean_after_split(obs.key_sum(l), per_prompt, o.prompts, rope,
                                     m.transformer->weights().layers[size_t(l)].bk, c.n_kv_heads, c.head_dim);
    rs.layers.push_back(std::move(lr));
    spectra.push_back({{"layer", l}, {"k", fk.eigenvalues}, {"v", fv.eigenvalues}});
  }
  rs.validate();
  const KvSpec base = tune.any() || o.model.k_scale ? tune_base_spec(o.model, o.group, o.sink, o.recent, c.head_dim)
                                                    : KvSpec{};
  nlohmann::json k_scale_fit;
  if (o.model.k_scale) {  // a second forward pass: the scale needs the centred keys' moments
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
                          {"model_file", std::filesystem::path(o.model.model).filename().string()},
                          {"calibration_text", text_desc},
                          {"calibration_sources", source_log},
                          {"tokens", per_prompt * o.prompts},
                          {"pool", o.pool},
                          {"prompts", o.prompts},
                          {"tokens_per_prompt", per_prompt},
                          {"eigenvalue_spectra", spectra},
                          {"seconds", seconds_since(t_start)}};
  if (!corpus.empty()) extra["calibration_corpus"] = corpus;
  if (!tuned.is_null()) extra["searches"] = tuned;
  if (!k_scale_fit.is_null()) extra["k_scale_fit"] = k_scale_fit;
  write_rotation_dir(rs, o.out_dir, extra);
  fmt::print(stderr, "wrote {} layers of rotations ({}, {}) to {} in {:.1f} s\n", c.n_layers, o.k_objective,
             o.v_objective, o.out_dir, seconds_since(t_start));
  return 0;
}
}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand("calibrate", "fit OSCAR rotations for a model on calibration text");
  add_model_options(*cmd, o->model, false);
  cmd->add_option("-f,--file", o->text_files,
                  "calibration text PATH[:WEIGHT] (never the evaluation text); repeat to mix several files, each "
                  "giving a WEIGHT-proportional share of the prompts and tokens (default weight 1); a .jsonl file "
                  "holds one chat a line (a JSON list of {\"role\", \"content\"}), rendered through the model's chat "
                  "template. Without -f and --corpus: the corpus in $OSCAR_CORPUS_DIR, else "
                  "$OSCAR_CACHE/data/corpus (~/.cache/oscar/data/corpus)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--corpus", o->corpus_dir,
                  "calibration corpus directory (scripts/fetch-corpus.sh): every manifest.json file with role "
                  "\"calib\", weighted by its \"weight\" (default 1); with -f, the files are added to it");
  cmd->add_option("-o,--out", o->out_dir, "output directory (RotationZoo .pt files + manifest.json)")->required();
  cmd->add_option("--tokens", o->tokens, "calibration tokens")->check(CLI::Range(int64_t(2), int64_t(1) << 30));
  cmd->add_option("--prompts", o->prompts, "number of prompts the tokens are cut into")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--group", o->group, "quant group along head_dim recorded with the rotations");
  cmd->add_option("--sink", o->sink, "BF16 sink tokens recorded with the rotations");
  cmd->add_option("--recent", o->recent, "BF16 recent tokens recorded with the rotations");
  cmd->add_option("--k-objective", o->k_objective, "key objective: <ktk|qqt|vtv|sst>_<composition>");
  cmd->add_option("--v-objective", o->v_objective, "value objective");
  cmd->add_option("--pool", o->pool,
                  "how the sources' covariances combine: tokens (one sum over every calibration token, so a source "
                  "counts by its token share and by the size of its activations; the default) or equal (each "
                  "source's covariances scaled to unit trace, then averaged by the sources' weights; the score "
                  "weights of sst use the source's own query covariance)")
      ->check(CLI::IsMember({"tokens", "equal"}));
  add_tune_options(*cmd, o->tune, /*clip_default=*/true, /*per_source_probes=*/true);
  cmd->get_option("--k-scale")->description(
      "also fit a per-channel key scale per layer (one more forward pass over the calibration tokens), refit R_K on "
      "the scaled queries and search the clips with it (used at run time with --k-scale)");
  cmd->callback([o] { calibrate(*o); });
}

}  // namespace oscar::cli
