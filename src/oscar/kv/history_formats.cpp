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
  if (rs && int(rs->layers.size()) != shape.n_layers)
    fail("rotation set has {} layers, the model {}", rs->layers.size(), shape.n_layers);
  for (int l = 0; l < shape.n_layers; ++l) {
    HistoryFormat k, v;
    k.quant = v.quant = spec.quant;
    k.head_dim = v.head_dim = d;
    k.group = v.group = group;
    k.block_tokens = v.block_tokens = spec.quant == KvQuant::kivi2 ? spec.kivi_tokens : spec.block_tokens;
    k.clip = rs ? rs->layers[size_t(l)].k_clip : spec.k_clip;
    v.clip = rs ? rs->layers[size_t(l)].v_clip : spec.v_clip;
    k.per_channel = spec.quant == KvQuant::kivi2;  // KIVI: keys per channel, values per token
    kf.push_back(k);
    vf.push_back(v);
  }
  return {kf, vf};
}

}  // namespace oscar
