// The searches `oscar calibrate` and `oscar rotations tune` run on fitted rotations, on
// calibration text the fit did not see: per-layer clip ratios, per-layer KV types under a
// bits budget, which layers keep their key means, and the per-channel key scale. Each
// measures the attention-output error of a layer against f32 (KvErrorProbe) with the real
// windows and group size, or the model's KL divergence end to end.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "oscar/engine/model_loader.h"
#include "oscar/kv/kv_spec.h"
#include "oscar/rotation/rotation_set.h"

namespace oscar::calib {

using engine::LoadedModel;

struct TuneOptions {
  bool clip_search = false;          // --clip-search
  bool no_clip_search = false;       // --no-clip-search
  bool clip_search_default = false;  // on unless --no-clip-search (calibrate)
  std::optional<double> kv_budget;   // mean history bits per element
  std::vector<std::string> budget_types = {"int4", "int8"};  // upgrades the budget may buy
  int64_t probe_tokens = 2048;
  int probe_queries = 256;
  // --clip-objective: "mean" searches the clips on one probe that mixes every calibration
  // source; "worst" (calibrate only) on one probe per source, minimizing the largest error.
  std::string clip_objective = "mean";
  bool k_mean_search = false;  // --k-mean-search: keep each layer's key mean only where it helps
  bool k_mean_check = false;  // --k-mean-check: drop the key means only if the model's KLD is clearly lower without
  bool worst_case() const { return (clip() || k_mean_search) && clip_objective == "worst"; }

  bool clip() const { return clip_search || (clip_search_default && !no_clip_search); }
  bool any() const { return clip() || kv_budget.has_value() || k_mean_search || k_mean_check; }
  // Asked for by a flag: then a search that cannot run is an error, not a note.
  bool requested() const { return clip_search || kv_budget.has_value() || k_mean_search || k_mean_check; }
};

// One calibration source's own probe text, for --clip-objective worst.
struct SourceProbe {
  std::string name;  // the source's domain, else its path
  std::vector<int32_t> ids;
};

// Runs the requested searches with `base` (a calibrated --kv type) on ids[probe_from ...]
// (or the text's start when too few tokens are left; fewer probe tokens when the text is
// short), writes the results into rs (clips, kv_layers, kv_budget_bits) and returns what
// was measured, for the manifest. With o.worst_case() the clip search runs on
// source_probes instead (each cut to --probe-tokens; one too short for the windows is left
// out with a note). A default-on search the text is too short for is skipped with a note
// (null result); a requested one throws.
nlohmann::json tune_rotations(LoadedModel& m, const std::vector<int32_t>& ids, int64_t probe_from, const KvSpec& base,
                              const TuneOptions& o, RotationSet& rs, std::span<const SourceProbe> source_probes = {});

// --k-scale: runs the model over ids[0, n) in prompts of per_prompt tokens (each from
// position 0) and, per layer, fits the per-channel key scale from the keys as the cache
// stores them under `base` (less RoPE(b_k, p) under --k-bias-split and rs's k_mean under
// --k-mean) and the queries, then refits R_K on the scaled queries with rs's K composition
// (the K objective must be qqt_*). Writes k_scale, k_rotation and k_eigenvalues into rs; the
// clips must be searched again afterwards. Returns what was fitted, for the manifest.
nlohmann::json fit_key_scales(LoadedModel& m, const std::vector<int32_t>& ids, int64_t n, int64_t per_prompt,
                              const KvSpec& base, RotationSet& rs);

}  // namespace oscar::calib
