// Folds R_V into the value projection (W_v, b_v) and R_Vᵀ into the output projection,
// in double precision, so decode needs no value rotation at run time (spec section 2).
#pragma once
#include "oscar/kv/rotation_set.h"
#include "oscar/model/model_weights.h"

namespace oscar {

void absorb_v_rotation(ModelWeights& w, const RotationSet& rs);

}  // namespace oscar
