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

// Decode over a batch: y[m, n] = x[m, k] · wᵀ (+ bias), each row bit-identical to what
// matmul(m = 1) gives for it, so that a sequence decodes to the same tokens alone or in a
// batch; the weights are read once per step for all m rows (threaded over n).
void matmul_decode(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t k, int64_t n);

// Columns [n0, n1) of y[m, n] = x[m, k] · wᵀ, each row computed as matvec_rows_* computes it.
void matmul_rows_ref(const float* x, int64_t m, const float* w, float* y, int64_t k, int64_t n, int64_t n0, int64_t n1);
void matmul_rows_avx2(const float* x, int64_t m, const float* w, float* y, int64_t k, int64_t n, int64_t n0, int64_t n1);

// Rows [n0, n1) of y = w · x for one vector x (no threading, no bias).
void matvec_rows_ref(const float* x, const float* w, float* y, int64_t k, int64_t n0, int64_t n1);
void matvec_rows_avx2(const float* x, const float* w, float* y, int64_t k, int64_t n0, int64_t n1);

}  // namespace oscar
