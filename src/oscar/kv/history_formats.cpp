#include "oscar/kv/history_formats.h"

#include <algorithm>

#include "oscar/core/error.h"

namespace oscar {

std::pair<std::vector<HistoryFormat>, std::vector<HistoryFormat>> make_history_formats(const KvSpec& spec,
                                                                                       const KvShape& shape,
                                                                                       const RotationSet* rs) {
  std::vector<HistoryFormat> kf, vf;
  if (!spec.quantized()) return {kf, vf};
  const int d = shape.head_dim;
  const int group = std::min(spec.group, d);
  if (d % group != 0) fail("--kv-group {} does not divide head_dim {}", group, d);
  spec.validate_layers(shape.n_layers);
  if (rs && int(rs->layers.size()) != shape.n_layers)
    fail("rotation set has {} layers, the model {}", rs->layers.size(), shape.n_layers);
  for (int l = 0; l < shape.n_layers; ++l) {
    // A bf16 layer of a per-layer mixed cache keeps its history rows as raw bf16.
    const KvQuant q = spec.layer_quant(l) == KvQuant::none ? KvQuant::bf16_raw : spec.layer_quant(l);
    // Clip ratios: OSCAR layers take the rotation set's, the others their type's (or the flags').
    const bool from_rs = rs && spec.layer_rotation(l) == KvRotation::calibrated && q != KvQuant::bf16_raw;
    HistoryFormat k, v;
    k.quant = v.quant = q;
    k.head_dim = v.head_dim = d;
    k.group = v.group = group;
    k.block_tokens = v.block_tokens = q == KvQuant::kivi2 ? spec.kivi_tokens : spec.block_tokens;
    k.clip = q == KvQuant::bf16_raw ? 0.0f : from_rs ? rs->layers[size_t(l)].k_clip : spec.layer_k_clip(l);
    v.clip = q == KvQuant::bf16_raw ? 0.0f : from_rs ? rs->layers[size_t(l)].v_clip : spec.layer_v_clip(l);
    k.per_channel = q == KvQuant::kivi2;  // KIVI: keys per channel, values per token
    // --kv-k-type / --kv-v-type: wider codes for one side in every quantized layer (no clip:
    // the clip ratios are fitted for 2-bit codes).
    if (q != KvQuant::bf16_raw && q != KvQuant::kivi2) {
      if (spec.k_quant != KvQuant::none) k.quant = spec.k_quant, k.clip = 0.0f;
      if (spec.v_quant != KvQuant::none) v.quant = spec.v_quant, v.clip = 0.0f;
    }
    kf.push_back(k);
    vf.push_back(v);
  }
  return {kf, vf};
}

}  // namespace oscar
