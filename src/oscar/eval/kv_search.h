// Calibration-time searches over measured per-layer attention-output error (a
// KvErrorProbe on calibration text): the clip ratio of each layer and side
// (`oscar calibrate --clip-search`), and per-layer KV types under a bits budget
// (`oscar calibrate --kv-budget`).
#pragma once
#include <span>
#include <string>
#include <vector>

#include "oscar/eval/layer_precision.h"
#include "oscar/eval/kv_error.h"

namespace oscar {

// Quantile clip ratios tried per layer and side (1: no clipping).
std::vector<float> default_clip_grid();

struct LayerClipChoice {
  float k_clip = 0.0f, v_clip = 0.0f;
  double error_before = 0.0, error_after = 0.0;  // the layer's error with rs's clips, then with the chosen
  // With several probes: each probe's error with the chosen clips (error_after is their maximum).
  std::vector<double> probe_errors;
};

// For each layer of a calibrated `spec` (int2-oscar*): the K clip over `grid` with V at
// rs's ratio, then the V clip with that K, keeping rs's own ratio unless a grid value
// measures lower. Writes the choices into rs. error_after ≤ error_before by construction.
std::vector<LayerClipChoice> search_clip_ratios(const KvErrorProbe& probe, const KvSpec& spec, RotationSet& rs,
                                                std::span<const float> grid);
// The same search on several probes (one per calibration domain, `--clip-objective worst`):
// a layer's error is the largest of the probes' errors, so the clips chosen are those of
// the worst case across the domains rather than of their mix. Needs at least one probe.
std::vector<LayerClipChoice> search_clip_ratios(std::span<const KvErrorProbe* const> probes, const KvSpec& spec,
                                                RotationSet& rs, std::span<const float> grid);

struct LayerKeyMeanChoice {
  bool kept = true;                                 // the layer keeps its key mean
  double error_with = 0.0, error_without = 0.0;     // largest probe error with and without it
};

// `--k-mean-search`: for each layer of a calibrated `spec` with key centring on (spec.k_mean)
// whose rotations carry a key mean, measures the largest probe error with and without it
// (at rs's clips) and drops it (empties rs's k_mean) where the layer does better without.
// A layer with no key mean is reported kept = false, both errors the same.
std::vector<LayerKeyMeanChoice> choose_key_means(std::span<const KvErrorProbe* const> probes, const KvSpec& spec,
                                                 RotationSet& rs);

struct LayerTypeChoice {
  std::vector<std::vector<LayerTypeCandidate>> candidates;  // per layer: base first, then `types`
  std::vector<int> pick;                                    // per layer: index into candidates
  std::string kv_layers;                                    // the --kv-layers string over the base
  double mean_history_bits = 0.0;
};

// Measures every layer in `base` (a calibrated spec) and in each of `types` (--kv-layers
// type names), then picks one per layer within budget_bits mean history bits per
// element (choose_layer_types). Throws oscar::Error for an unknown type or a budget
// below the base's bits.
LayerTypeChoice choose_kv_layer_types(const KvErrorProbe& probe, const KvSpec& base, const RotationSet& rs,
                                      const std::vector<std::string>& types, double budget_bits);

}  // namespace oscar
