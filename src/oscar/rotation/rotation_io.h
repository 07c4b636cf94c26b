// RotationZoo rotation directories (spec section 7) <-> RotationSet.
//
// A directory holds k_rotation_<k_objective>.pt and v_rotation_<v_objective>.pt, each a
// torch.save of {"format_version": 1, "objective", "source_grouping", "layers":
// {layer: {"layer_id", "rotation" float32 [d, d], "eigenvalues" float32 [d]}}}, and
// manifest.json with what the .pt files have no place for:
//   {"format": "oscar-rotations", "version": 1, "head_dim", "group_size", "sink_tokens",
//    "recent_tokens", "k_objective", "v_objective", "source_grouping", "k_file",
//    "v_file", "n_layers", "layers": [{"layer", "k_clip", "v_clip", optional "k_mean", "k_scale"}, ...],
//    optional "kv_layers" and "kv_budget_bits" (per-layer KV types, --kv-budget), ...extra}
// Directories from RotationZoo itself have no manifest; then the reader uses the
// spec's defaults: clip K 0.96, V 0.92, group min(128, d), sink 64, recent 256.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "oscar/rotation/rotation_set.h"

namespace oscar {

constexpr float default_k_clip = 0.96f;  // the reference's defaults (spec section 3)
constexpr float default_v_clip = 0.92f;

// One .pt rotation file, as read.
struct RotationFile {
  std::string objective;        // "objective" in the file ("" when absent)
  std::string source_grouping;  // "layer" when absent
  int head_dim = 0;
  std::vector<std::vector<float>> rotations;    // [n_layers][d·d] row-major
  std::vector<std::vector<float>> eigenvalues;  // [n_layers][d], empty when absent
};

// Reads one rotation file. Layer keys may be ints or decimal strings and must cover
// 0..n-1; unknown keys are ignored; rotations of float32/float64/float16/bfloat16 are
// accepted. Throws oscar::Error naming the file and the layer.
RotationFile read_rotation_file(const std::string& path);

// Writes both .pt files and manifest.json into `dir` (created if needed) after
// rs.validate(). Identity rotations (empty matrices) are written as explicit identity
// matrices and missing eigenvalues as ones (the Hadamard baseline's convention).
// `extra` (an object) adds keys to the manifest (model, tokens, prompts, spectra...).
void write_rotation_dir(const RotationSet& rs, const std::string& dir,
                        const nlohmann::json& extra = nlohmann::json::object());

// Reads a directory written by write_rotation_dir or by RotationZoo (see above for the
// defaults without a manifest). Files: the manifest's k_file/v_file, else the single
// k_rotation_*.pt / v_rotation_*.pt (when there are several, the default objectives'
// files). The result has passed validate().
RotationSet read_rotation_dir(const std::string& dir);

}  // namespace oscar
