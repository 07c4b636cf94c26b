// Dot products of one F16 or BF16 weight row with f32 activation rows (any k ≥ 1), the
// weights widened in registers; a scalar reference beside every AVX2/F16C kernel.
#pragma once
#include <cstdint>

#include "oscar/formats/ggml_type.h"

namespace oscar::qmat {

// Σ_i w[i]·x[i] over k elements; w_row holds k 16-bit values (no alignment needed).
using FDotFn = float (*)(const void* w_row, const float* x, int64_t k);
// The same for two activation rows at once (the weights widened once): out[0] / out[1]
// are bit-identical to the single-row kernel of the same family for x0 / x1.
using FDot2Fn = void (*)(const void* w_row, const float* x0, const float* x1, int64_t k, float* out);

float fdot_f16_ref(const void* w, const float* x, int64_t k);
float fdot_bf16_ref(const void* w, const float* x, int64_t k);
void fdot2_f16_ref(const void* w, const float* x0, const float* x1, int64_t k, float* out);
void fdot2_bf16_ref(const void* w, const float* x0, const float* x1, int64_t k, float* out);
float fdot_f16_avx2(const void* w, const float* x, int64_t k);
float fdot_bf16_avx2(const void* w, const float* x, int64_t k);
void fdot2_f16_avx2(const void* w, const float* x0, const float* x1, int64_t k, float* out);
void fdot2_bf16_avx2(const void* w, const float* x0, const float* x1, int64_t k, float* out);

// The kernels for F16 / BF16; nullptr for any other type.
FDotFn fdot_ref_kernel(GgmlType t);
FDotFn fdot_avx2_kernel(GgmlType t);
FDot2Fn fdot2_ref_kernel(GgmlType t);
FDot2Fn fdot2_avx2_kernel(GgmlType t);

// n F16 values widened to f32 with F16C (exact, as fp16_to_f32 is).
void f16_to_f32_avx2(const void* src, float* dst, int64_t n);

}  // namespace oscar::qmat
