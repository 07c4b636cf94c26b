// Vectorized dequantization for the formats whose scalar dequantize_row (formats/) is slow
// enough to matter in the panel path of linear(); bit-identical to dequantize_row.
#pragma once
#include <cstdint>

namespace oscar::qmat {

// n elements (a multiple of 256) of Q6_K at src into dst.
void dequantize_q6_k_avx2(const void* src, float* dst, int64_t n);

}  // namespace oscar::qmat
