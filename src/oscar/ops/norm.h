// RMSNorm over rows: y = x / sqrt(mean(x²) + eps) · w.
#pragma once
#include <cstdint>

namespace oscar {

// x, y: [rows, n] (may alias); w: [n].
void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps);

}  // namespace oscar
