// Folds R_V into the value projection (W_v, b_v) and R_Vᵀ into the output projection,
// in double precision, so decode needs no value rotation at run time (spec section 2).
#pragma once
#include <cstdint>
#include <vector>

#include "oscar/rotation/rotation_set.h"
#include "oscar/model/model_weights.h"

namespace oscar {

void absorb_v_rotation(ModelWeights& w, const RotationSet& rs);

// x'_i = Σ_j R[j][i] · x_j (sums in double) over the d values x_j = base[j · stride]: one
// head's column of W_v or its bias becomes Rᵀ x (R [d, d] row-major, d ≤ 512).
void rotate_value_column(const std::vector<float>& r, int d, float* base, int64_t stride);

}  // namespace oscar
