// oscar calibrate: the calibration pipeline (oscar/calib/calibrate.h) on the text the flags
// name, then RotationZoo files plus a JSON manifest. The text is one file, several
// (`-f PATH[:WEIGHT]`, mixed in proportion to the weights) or the multi-domain corpus
// (`--corpus`, the default).
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "calibrate_tune.h"
#include "commands.h"
#include "common.h"
#include "oscar/calib/calibrate.h"
#include "oscar/core/error.h"
#include "oscar/eval/calib_sources.h"
#include "oscar/rotation/rotation_io.h"

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

int calibrate(const CalibrateOptions& o) {
  const auto t_start = std::chrono::steady_clock::now();
  // Flags first: fail before the slow part. The default-on clip search only tunes OSCAR types.
  calib::CalibrationOptions co;
  co.tokens = o.tokens, co.prompts = o.prompts;
  co.group = o.group, co.sink = o.sink, co.recent = o.recent;
  co.pool = o.pool, co.k_objective = o.k_objective, co.v_objective = o.v_objective;
  co.k_clip = o.model.k_clip.value_or(0.96f);  // --k-clip / --v-clip; the published recipe by default
  co.v_clip = o.model.v_clip.value_or(0.92f);
  co.k_scale = o.model.k_scale;
  co.tune = o.tune;
  calib::check_options(co);
  std::string corpus;
  const std::vector<CalibSource> sources = calibration_sources(o, corpus);
  if (co.tune.requested() || o.model.k_scale) tune_base_spec(o.model, o.group, o.sink, o.recent, o.group);
  else if (co.tune.any() && KvSpec::parse(tune_base_kv(o.model)).rotation != KvRotation::calibrated)
    co.tune.clip_search_default = false;
  ModelOptions mo = o.model;
  mo.kv = "bf16";  // calibration sees the model's own (unquantized) attention inputs
  mo.kv_layers.reset();
  mo.k_scale = false;
  mo.k_clip.reset();
  mo.v_clip.reset();
  LoadedModel m = load_model(mo);
  const ModelConfig& c = m.transformer->config();
  if (co.tune.any() || o.model.k_scale) co.base = tune_base_spec(o.model, o.group, o.sink, o.recent, c.head_dim);
  co.text_desc = sources.size() == 1                         ? sources[0].path
                 : !corpus.empty() && o.text_files.empty() ? "corpus " + corpus
                                                           : fmt::format("{} sources", sources.size());
  calib::Calibration cal = calib::calibrate(m, sources, co);
  cal.manifest["model_file"] = std::filesystem::path(o.model.model).filename().string();
  if (!corpus.empty()) cal.manifest["calibration_corpus"] = corpus;
  write_rotation_dir(cal.rotations, o.out_dir, cal.manifest);
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
