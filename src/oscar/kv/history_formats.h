// Per-layer history formats for a KV spec: group clamped to head_dim; each layer's type
// from spec.layer_quant (a bf16 layer of a mixed cache: bf16_raw rows); clip ratios from
// the spec (the layer's type) or, for layers with calibrated rotations when a rotation
// set is given, from its per-layer values.
#pragma once
#include <utility>
#include <vector>

#include "oscar/kv/history_format.h"
#include "oscar/kv/kv_spec.h"
#include "oscar/rotation/rotation_set.h"

namespace oscar {

std::pair<std::vector<HistoryFormat>, std::vector<HistoryFormat>> make_history_formats(const KvSpec& spec,
                                                                                       const KvShape& shape,
                                                                                       const RotationSet* rs);

}  // namespace oscar
