// Pointwise ops of the MLP and the residual stream.
#pragma once
#include <cstdint>

namespace oscar {

// gate[i] = silu(gate[i]) * up[i]  (SwiGLU)
void swiglu(float* gate, const float* up, int64_t n);
// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);
// In-place softmax of one row; returns nothing. Stable (subtracts the max).
void softmax_inplace(float* x, int64_t n);

}  // namespace oscar
