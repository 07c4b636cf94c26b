// oscar eval-kv: per-layer relative error of the attention output for each KV format,
// against an f32 cache, on the q/k/v one f32-KV forward pass over real text produced.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "common.h"
#include "oscar/core/error.h"
#include "oscar/eval/k_channel.h"
#include "oscar/eval/kv_error.h"
#include "oscar/eval/kv_search.h"
#include "oscar/eval/kv_stats.h"
#include "oscar/rotation/hadamard.h"
#include "oscar/formats/gguf.h"
#include "oscar/rotation/rotation_gguf.h"

namespace oscar::cli {

namespace {
struct EvalKvOptions {
  ModelOptions model;
  std::string file;
  int queries = 256;
  bool stats = false;
  std::string json_out;
  std::string k_channel_file;  // calibration text for the per-channel K transform comparison
};

const char* kDefaultModes = "bf16,int8,int4,int2,int2-hadamard,kivi2";
const char* kOscarModes = ",int2-oscar,int2-oscar-lloydmax,int2-oscar-lloydmax-exact";

std::vector<std::string> split_modes(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string m; std::getline(ss, m, ',');)
    if (!m.empty()) out.push_back(m);
  if (out.empty()) fail("--kv: no KV types given");
  return out;
}

// Rotations from --rotations, else the ones embedded in the model's GGUF, else none.
std::optional<RotationSet> find_rotations(const ModelOptions& o) {
  std::optional<RotationSet> rs;
  if (!o.rotations.empty()) rs = load_rotations(o.rotations);
  else if (o.model.ends_with(".gguf")) rs = read_embedded_rotations(gguf::GgufFile::open(o.model));
  if (rs) apply_clip_flags(o, *rs);
  return rs;
}

struct ModeResult {
  std::string mode;
  double bits = 0.0;
  std::vector<double> layer_error;
  double mean() const {
    double s = 0.0;
    for (double e : layer_error) s += e;
    return layer_error.empty() ? 0.0 : s / double(layer_error.size());
  }
};

// Per layer, averaged over KV heads: what the K and V rows look like to a per-row
// quantizer before and after each rotation (see kv_stats.h).
void print_row_stats(const Transformer& model, const QkvRecorder& rec, int64_t n, const RotationSet* rs) {
  const ModelConfig& c = model.config();
  const int d = c.head_dim;
  const int64_t stride = int64_t(c.n_kv_heads) * d;
  std::vector<float> H(size_t(d) * size_t(d), 0.0f);  // explicit normalized Hadamard, for row_stats
  for (int i = 0; i < d; ++i) {
    H[size_t(i) * size_t(d) + size_t(i)] = 1.0f;
    hadamard_transform_rows(H.data() + size_t(i) * size_t(d), 1, d);
  }
  fmt::print("K and V rows per layer (mean over {} KV heads; max/rms: mean over rows of max|x| / rms(x); "
             "outlier: max / median channel RMS; bias: ‖b_k‖² / mean ‖k‖²)\n\n", c.n_kv_heads);
  fmt::print("| layer | K rms | K bias share | K outlier | K max/rms | K max/rms Hadamard | K max/rms OSCAR | V max/rms | V max/rms OSCAR |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|\n");
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerQkv& x = rec.layer(l);
    const std::vector<float>& bk = model.weights().layers[size_t(l)].bk;
    const LayerRotation* lr = rs ? &rs->layers[size_t(l)] : nullptr;
    RowStats k{}, kh{}, ko{}, v{}, vo{};
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const std::span<const float> bias = bk.empty() ? std::span<const float>() : std::span<const float>(bk.data() + h * d, size_t(d));
      auto add = [](RowStats& acc, const RowStats& s) {
        acc.rms += s.rms, acc.max_over_rms += s.max_over_rms, acc.channel_outlier += s.channel_outlier, acc.bias_share += s.bias_share;
      };
      add(k, row_stats(x.k.data() + h * d, n, stride, d, bias));
      add(kh, row_stats(x.k.data() + h * d, n, stride, d, {}, H.data()));
      add(v, row_stats(x.v.data() + h * d, n, stride, d));
      if (lr && !lr->k_rotation.empty()) add(ko, row_stats(x.k.data() + h * d, n, stride, d, {}, lr->k_rotation.data()));
      if (lr && !lr->v_rotation.empty()) add(vo, row_stats(x.v.data() + h * d, n, stride, d, {}, lr->v_rotation.data()));
    }
    const double nh = c.n_kv_heads;
    auto opt = [&](const RowStats& s) { return rs ? fmt::format("{:.2f}", s.max_over_rms / nh) : std::string("-"); };
    fmt::print("| {} | {:.2f} | {:.3f} | {:.1f} | {:.2f} | {:.2f} | {} | {:.2f} | {} |\n", l, k.rms / nh, k.bias_share / nh,
               k.channel_outlier / nh, k.max_over_rms / nh, kh.max_over_rms / nh, opt(ko), v.max_over_rms / nh, opt(vo));
  }
  fmt::print("\n");
}

// The first n tokens of `path`, fed through the f32 model with q/k/v recorded.
void record_qkv(LoadedModel& m, const std::string& path, int64_t n, QkvRecorder& rec) {
  std::vector<int32_t> ids = m.tokenizer->encode(read_text_file(path), m.tokenizer->add_bos(), false);
  if (int64_t(ids.size()) < n) fail("'{}' has {} tokens, fewer than -c {}", path, ids.size(), n);
  ids.resize(size_t(n));
  m.transformer->set_observer(&rec);
  KvCache cache = m.transformer->make_cache(n);
  const SeqId seq = cache.add_sequence();
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  m.transformer->forward(cache, seq, ids, LogitsFor::last, logits);
  m.transformer->set_observer(nullptr);
  fmt::print(stderr, "recorded q/k/v of {} layers over {} tokens of {} in {:.1f} s\n", m.transformer->config().n_layers,
             n, std::filesystem::path(path).filename().string(), seconds_since(t0));
}

// Issue 6's per-channel K centring/scaling candidate (k_channel.h): fitted and clip-searched
// on the calibration text, measured on the evaluation recording.
void compare_k_channel(LoadedModel& m, const EvalKvOptions& o, const QkvRecorder& eval, int64_t n,
                       const std::vector<KvSpec>& specs, const std::optional<RotationSet>& rs) {
  const ModelConfig& c = m.transformer->config();
  if (!rs) fail("--k-channel needs calibrated rotations (--rotations DIR|GGUF)");
  const KvSpec* spec = nullptr;
  for (const KvSpec& s : specs)
    if (s.uses_rotation(KvRotation::calibrated, c.n_layers) && !s.mixed() && s.quantized()) spec = &s;
  if (!spec) fail("--k-channel: give an int2-oscar type in --kv");
  QkvRecorder calib(c.n_layers, AttentionShape{c.n_heads, c.n_kv_heads, c.head_dim});
  record_qkv(m, o.k_channel_file, n, calib);
  // {center, mean, scale, refit}
  const std::vector<KChannelVariant> variants = {{false, false, false, true}, {true, false, false, false},
                                                 {false, true, false, false}, {true, true, false, false},
                                                 {false, false, true, true},  {false, true, true, true},
                                                 {true, false, true, true}};
  const std::vector<float> grid = default_clip_grid();
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<KChannelResult> res =
      compare_k_channel_variants(*m.transformer, calib, eval, n, o.queries, *spec, *rs, variants, grid);
  fmt::print(stderr, "k-channel comparison in {:.1f} s\n", seconds_since(t0));

  fmt::print("\nPer-channel K transforms before the rotation: held-out attention-output error per layer\n");
  fmt::print("(fitted, and each K clip searched, on {} tokens of {}; gain: the predicted error-product factor of "
             "the scale, (Σ√(Q_c K_c))² / (ΣQ_c·ΣK_c); clip: searched K clip)\n\n",
             n, std::filesystem::path(o.k_channel_file).filename().string());
  fmt::print("| layer | gain |");
  for (const KChannelResult& r : res) fmt::print(" {} | clip |", r.variant);
  fmt::print("\n|---|---|");
  for (size_t i = 0; i < res.size(); ++i) fmt::print("---|---|");
  fmt::print("\n");
  for (int l = 0; l < c.n_layers; ++l) {
    fmt::print("| {} | {:.3f} |", l, res[0].predicted_gain[size_t(l)]);
    for (const KChannelResult& r : res) fmt::print(" {:.4f} | {:.2f} |", r.layer_error[size_t(l)], r.k_clip[size_t(l)]);
    fmt::print("\n");
  }
  fmt::print("| mean | |");
  for (const KChannelResult& r : res) fmt::print(" {:.4f} | |", r.mean_error());
  fmt::print("\n");
}

int eval_kv(const EvalKvOptions& o, const std::string& modes_flag) {
  ModelOptions mo = o.model;
  mo.kv = "f32";  // the reference trajectory: every format sees the model's own q, k, v
  mo.kv_layers.reset();
  mo.rotations.clear();
  LoadedModel m = load_model(mo);
  const ModelConfig& c = m.transformer->config();
  const std::optional<RotationSet> rs = find_rotations(o.model);
  const std::vector<std::string> modes = split_modes(modes_flag.empty() ? std::string(kDefaultModes) + (rs ? kOscarModes : "") : modes_flag);
  std::vector<KvSpec> specs;
  for (const std::string& mode : modes) {
    ModelOptions so = o.model;
    so.kv = mode;
    specs.push_back(kv_spec_from(so, c.n_layers));  // --kv-layers applies to every compared type
    apply_calibrated_layer_types(specs.back(), o.model, rs ? &*rs : nullptr, c.n_layers);
    if (specs.back().uses_rotation(KvRotation::calibrated, c.n_layers) && !rs)
      fail("KV type '{}' needs calibrated rotations (--rotations DIR|GGUF, made by `oscar calibrate`)",
           specs.back().name());
  }
  if (rs && (rs->head_dim != c.head_dim || int(rs->layers.size()) != c.n_layers))
    fail("rotations are for {} layers of head_dim {}, the model has {} layers of head_dim {}", rs->layers.size(),
         rs->head_dim, c.n_layers, c.head_dim);

  const int64_t n = std::min<int64_t>(o.model.ctx, c.n_ctx_train > 0 ? c.n_ctx_train : o.model.ctx);
  if (o.queries < 1 || o.queries > n) fail("--queries must be in [1, {}], got {}", n, o.queries);
  QkvRecorder rec(c.n_layers, AttentionShape{c.n_heads, c.n_kv_heads, c.head_dim});
  record_qkv(m, o.file, n, rec);
  if (o.stats) print_row_stats(*m.transformer, rec, n, rs ? &*rs : nullptr);
  if (!o.k_channel_file.empty()) {
    compare_k_channel(m, o, rec, n, specs, rs);
    return 0;
  }

  const KvErrorProbe probe(*m.transformer, rec, n, o.queries);
  std::vector<ModeResult> results;
  for (const KvSpec& spec : specs) {
    const auto t0 = std::chrono::steady_clock::now();
    ModeResult r{spec.name(), 0.0, {}};
    for (const KvErrorProbe::LayerResult& lr : probe.all_layers(spec, rs ? &*rs : nullptr)) {
      r.layer_error.push_back(lr.error);
      r.bits += lr.bits / c.n_layers;  // the layers' mean (each holds the same elements)
    }
    fmt::print(stderr, "{:<26} mean error {:.4f} ({:.1f} s)\n", r.mode, r.mean(), seconds_since(t0));
    results.push_back(std::move(r));
  }

  fmt::print("Relative L2 error of the attention output against an f32 KV cache, per layer\n");
  fmt::print("({}, {} tokens of {}, last {} queries; each layer fed the f32 model's own q/k/v)\n\n",
             std::filesystem::path(o.model.model).filename().string(), n, std::filesystem::path(o.file).filename().string(),
             o.queries);
  fmt::print("| layer |");
  for (const ModeResult& r : results) fmt::print(" {} |", r.mode);
  fmt::print("\n|---|");
  for (size_t i = 0; i < results.size(); ++i) fmt::print("---|");
  fmt::print("\n");
  for (int l = 0; l < c.n_layers; ++l) {
    fmt::print("| {} |", l);
    for (const ModeResult& r : results) fmt::print(" {:.4f} |", r.layer_error[size_t(l)]);
    fmt::print("\n");
  }
  fmt::print("| mean |");
  for (const ModeResult& r : results) fmt::print(" {:.4f} |", r.mean());
  fmt::print("\n| bits/element |");
  for (const ModeResult& r : results) fmt::print(" {:.3f} |", r.bits);
  fmt::print("\n");

  if (!o.json_out.empty()) {
    nlohmann::json j = {{"model", std::filesystem::path(o.model.model).filename().string()},
                        {"text", std::filesystem::path(o.file).filename().string()},
                        {"tokens", n},
                        {"queries", o.queries},
                        {"reference", "f32"},
                        {"modes", nlohmann::json::array()}};
    for (const ModeResult& r : results)
      j["modes"].push_back({{"kv", r.mode}, {"bits_per_element", r.bits}, {"mean_error", r.mean()}, {"layer_error", r.layer_error}});
    write_json_file(o.json_out, j);
  }
  return 0;
}
}  // namespace

void add_eval_kv_command(CLI::App& app) {
  auto o = std::make_shared<EvalKvOptions>();
  o->model.ctx = 4096;
  CLI::App* cmd = app.add_subcommand("eval-kv", "per-layer attention-output error of KV cache formats against f32");
  add_model_options(*cmd, o->model);
  cmd->get_option("--kv")->description(
      "comma-separated KV types to compare (default: bf16,int8,int4,int2,int2-hadamard,kivi2, and the int2-oscar "
      "types when rotations are available)");
  cmd->add_option("-f,--file", o->file, "text file (first -c tokens are used)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--queries", o->queries, "score the attention output of the last N positions");
  cmd->add_flag("--stats", o->stats, "also print per-layer K/V row statistics (outliers, bias share, max/RMS after rotation)");
  cmd->add_option("--json", o->json_out, "also write the table as JSON to this file");
  cmd->add_option("--k-channel", o->k_channel_file,
                  "instead of the table: measure per-channel K centring/scaling before the rotation, fitted on this "
                  "calibration text (needs an int2-oscar type in --kv)")
      ->check(CLI::ExistingFile);
  cmd->callback([o, cmd] { eval_kv(*o, cmd->count("--kv") ? o->model.kv : std::string()); });
}

}  // namespace oscar::cli
