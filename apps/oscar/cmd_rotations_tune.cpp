// oscar rotations tune: the calibration searches (--clip-search, --kv-budget) on rotations
// already fitted, written to a new directory with the original manifest's record kept.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "calibrate_tune.h"
#include "oscar/core/error.h"
#include "oscar/rotation/rotation_io.h"

namespace oscar::cli {

namespace {
struct RotationsTuneOptions {
  ModelOptions model;
  std::string text_file, out_dir;
  std::optional<int64_t> probe_from;
  int64_t k_scale_tokens = 4000;
  TuneOptions tune;
};

// The source directory's manifest (empty for a GGUF or a RotationZoo directory), less what
// this run decides again.
nlohmann::json kept_manifest(const std::string& rotations) {
  const std::filesystem::path p = std::filesystem::path(rotations) / "manifest.json";
  if (!std::filesystem::is_directory(rotations) || !std::filesystem::exists(p)) return nlohmann::json::object();
  std::ifstream in(p);
  nlohmann::json m = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object()) return nlohmann::json::object();  // read_rotation_dir has already accepted it; be lenient
  for (const char* k : {"kv_layers", "kv_budget_bits", "searches"}) m.erase(k);
  return m;
}

int tune(const RotationsTuneOptions& opts) {
  RotationsTuneOptions o = opts;
  if (o.model.k_scale) o.tune.clip_search = true;  // the old clips were searched without the scale
  if (!o.tune.any()) fail("nothing to tune: give --clip-search, --kv-budget BITS, --k-mean-search, --k-mean-check and/or --k-scale");
  RotationSet rs = load_rotations(o.model.rotations);
  std::error_code ec;
  if (std::filesystem::equivalent(o.out_dir, o.model.rotations, ec))
    fail("--out must differ from --rotations ('{}'): the fitted rotations are kept as they were", o.out_dir);
  const KvSpec base_check = tune_base_spec(o.model, rs.group_size, rs.sink_tokens, rs.recent_tokens, rs.head_dim);
  ModelOptions mo = o.model;
  mo.kv = "bf16";  // the searches record the model's own q, k, v
  mo.kv_layers.reset();
  mo.rotations.clear();
  mo.k_scale = false;
  LoadedModel m = load_model(mo);
  const ModelConfig& c = m.transformer->config();
  if (rs.head_dim != c.head_dim || int(rs.layers.size()) != c.n_layers)
    fail("rotations are for {} layers of head_dim {}, the model has {} layers of head_dim {}", rs.layers.size(),
         rs.head_dim, c.n_layers, c.head_dim);
  const std::vector<int32_t> ids = m.tokenizer->encode(read_text_file(o.text_file, "calibration text "), false, false);
  nlohmann::json extra = kept_manifest(o.model.rotations);
  // Measure after the tokens the rotations were fitted on (the manifest says how many).
  const int64_t from = o.probe_from.value_or(extra.value("tokens", int64_t(0)));
  if (o.model.k_scale) {  // on the tokens the rotations were fitted on, in their prompt length
    const int64_t per_prompt = extra.value("tokens_per_prompt", int64_t(500));
    extra["k_scale_fit"] = fit_key_scales(m, ids, o.k_scale_tokens, per_prompt, base_check, rs);
  }
  extra["searches"] = tune_rotations(m, ids, from, base_check, o.tune, rs);
  extra["tuned_from"] = o.model.rotations;
  rs.validate();
  write_rotation_dir(rs, o.out_dir, extra);
  fmt::print(stderr, "wrote tuned rotations to {}\n", o.out_dir);
  return 0;
}
}  // namespace

void add_rotations_tune_command(CLI::App& rotations) {
  auto o = std::make_shared<RotationsTuneOptions>();
  CLI::App* cmd = rotations.add_subcommand("tune", "per-layer clip ratios and/or per-layer KV types for fitted rotations");
  add_model_options(*cmd, o->model, false);
  cmd->get_option("--rotations")->required()->description("fitted rotations: a directory or a GGUF with them embedded");
  cmd->add_option("-f,--file", o->text_file, "calibration text (never the evaluation text)")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--out", o->out_dir, "output rotation directory")->required();
  cmd->add_option("--probe-from", o->probe_from, "first token of the text to measure on (default: after the fitted tokens)");
  add_tune_options(*cmd, o->tune, /*clip_default=*/false);
  cmd->get_option("--k-scale")->description(
      "fit a per-channel key scale per layer on the first --k-scale-tokens calibration tokens, refit R_K on the "
      "scaled queries and search the clips again with it (used at run time with --k-scale)");
  cmd->add_option("--k-scale-tokens", o->k_scale_tokens, "calibration tokens the key scale is fitted on (default 4000)")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 30));
  cmd->callback([o] { tune(*o); });
}

}  // namespace oscar::cli
