// The calibration pipeline, what `oscar calibrate` runs (docs/calibration.md): stream a
// model over calibration text, accumulate the attention-aware covariances per layer in
// float64 (pass 1: Σ_Q, Σ_K, Σ_V; pass 2: score-weighted Σ_V with the frozen C_Q,h), fit
// R = eigvec · Hadamard · bit-reversal permutation per layer, the key means, and optionally
// the key scale and the searches on the fitted rotations (tune.h). The command resolves the
// sources and writes the files.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "oscar/calib/tune.h"
#include "oscar/engine/model_loader.h"
#include "oscar/eval/calib_sources.h"
#include "oscar/kv/kv_spec.h"
#include "oscar/rotation/rotation_set.h"

namespace oscar::calib {

struct CalibrationOptions {
  int64_t tokens = 20000;  // calibration tokens, cut into `prompts` windows
  int prompts = 40;
  int group = 128, sink = 64, recent = 256;  // recorded with the rotations
  std::string pool = "tokens";               // how the sources' covariances combine: tokens | equal
  std::string k_objective = "qqt_r_h_pbr", v_objective = "sst_r_h_pbr";
  float k_clip = 0.96f, v_clip = 0.92f;  // every layer's, unless a search sets them
  bool k_scale = false;                  // also fit the per-channel key scale (one more forward pass)
  KvSpec base;                           // the calibrated KV type the searches and the key scale measure
  TuneOptions tune;                      // the searches after the fit
  std::string text_desc;                 // how the log and the manifest name the text
};

struct Calibration {
  RotationSet rotations;
  nlohmann::json manifest;  // what to record beside them: sources, tokens, spectra, searches, seconds
};

// What calibrate() checks before it runs (the objectives' names, tokens against prompts),
// for a caller that wants to fail before loading the model. Throws oscar::Error.
void check_options(const CalibrationOptions& o);

// m is loaded with a BF16 cache (calibration sees the model's own attention inputs);
// sources are read, tokenized through the model's chat template where they are chats, and
// mixed by weight. Progress goes to stderr. Throws oscar::Error naming what is wrong.
Calibration calibrate(LoadedModel& m, const std::vector<CalibSource>& sources, const CalibrationOptions& o);

}  // namespace oscar::calib
