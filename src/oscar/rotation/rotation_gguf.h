// OSCAR rotations inside a GGUF model file: per layer F32 tensors oscar.rot_k.N and
// oscar.rot_v.N ([d, d], row-major, k' = k·R) plus oscar.* metadata (group, windows,
// objectives, per-layer clip ratios, optional oscar.kv_layers / oscar.kv_budget_bits), and
// optional oscar.k_mean.N and oscar.k_scale.N ([d, n_kv_heads] F32, --k-mean, --k-scale), so
// one file carries the model
// and its KV format.
#pragma once
#include <optional>
#include <string>

#include "oscar/formats/gguf.h"
#include "oscar/rotation/rotation_set.h"

namespace oscar {

// Copies `model` to `out_path` with the rotations added (replacing any embedded ones).
void embed_rotations(const gguf::GgufFile& model, const RotationSet& rs, const std::string& out_path);
// The embedded rotations, or nullopt when the file has none. Throws oscar::Error when
// they are present but inconsistent.
std::optional<RotationSet> read_embedded_rotations(const gguf::GgufFile& f);

}  // namespace oscar
