// Dense layers: y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]), all row-major f32.
// A weight is stored as [out_features, in_features], as in GGUF and PyTorch.
#pragma once
#include <cstdint>

namespace oscar {

// Plain triple loop with double accumulation: the reference for every fast path.
void matmul_ref(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t k, int64_t n);

// Fast path: m == 1 goes to the threaded AVX2 matrix-vector kernel (decode is bound by
// reading w once); m > 1 goes to OpenBLAS sgemm (prefill is bound by compute).
void matmul(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t k, int64_t n);

// Rows [n0, n1) of y = w · x for one vector x (no threading, no bias).
void matvec_rows_ref(const float* x, const float* w, float* y, int64_t k, int64_t n0, int64_t n1);
void matvec_rows_avx2(const float* x, const float* w, float* y, int64_t k, int64_t n0, int64_t n1);

}  // namespace oscar
