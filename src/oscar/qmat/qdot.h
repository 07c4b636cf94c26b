// Dot products between one weight row kept in its GGUF block format and an activation
// row quantized to 8 bits, as llama.cpp-style integer kernels do them: the weight row is
// read in its own bytes (4–8× fewer than f32), the arithmetic is integer inside a block
// and f32 across blocks. A scalar reference sits beside every AVX2 kernel.
#pragma once
#include <cstdint>

#include "oscar/formats/ggml_type.h"

namespace oscar::qmat {

// Activations are quantized in blocks of 32, the legacy quants' block and the K-quants'
// sub-block, so one activation row serves every weight format.
constexpr int64_t act_block = 32;

// One block of 32 activations: x[i] ≈ d·q[i]; sum = d·Σq[i], the term that a weight
// format with a minimum (Q4_1, Q5_1, Q4_K, Q5_K) multiplies by its minimum.
struct ActQ8Block {
  float d;        // max|x| / 127; 0 for an all-zero block
  float sum;      // d · Σ q[i]
  int8_t q[32];   // round-to-nearest-even of x[i] / d, in [-127, 127]
};

// Quantizes k activations (k a multiple of 32) into k / 32 blocks. The AVX2 version gives
// the same bytes as the reference (same scale, same rounding: x · (1/d), nearest even).
void quantize_act_ref(const float* x, ActQ8Block* out, int64_t k);
void quantize_act_avx2(const float* x, ActQ8Block* out, int64_t k);

// Σ_i w[i]·x[i] over one weight row of k elements (k a multiple of the format's block:
// 32 for Q4_0 … Q8_0, 256 for the K-quants) against its quantized activation row.
using QDotFn = float (*)(const void* w_row, const ActQ8Block* x, int64_t k);

// The kernel for a block format (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K);
// nullptr for any other type.
QDotFn qdot_ref_kernel(GgmlType t);
QDotFn qdot_avx2_kernel(GgmlType t);

// Four activation rows (x, x + x_stride, x + 2·x_stride, x + 3·x_stride blocks) against
// one weight row: out[i] is bit-identical to the one-row AVX2 kernel on row i (each sum is
// formed in the same order), with every weight block unpacked once for the four. nullptr
// for a format without one. Scalar reference: four calls of the one-row kernel.
using QDot4Fn = void (*)(const void* w_row, const ActQ8Block* x, int64_t x_stride, int64_t k, float* out);
QDot4Fn qdot4_avx2_kernel(GgmlType t);

// The per-format kernels behind the tables.
float qdot_q4_0_ref(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q4_1_ref(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q5_0_ref(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q5_1_ref(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q8_0_ref(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q4_k_ref(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q5_k_ref(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q6_k_ref(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q4_0_avx2(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q4_1_avx2(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q5_0_avx2(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q5_1_avx2(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q8_0_avx2(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q4_k_avx2(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q5_k_avx2(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q6_k_avx2(const void* w, const ActQ8Block* x, int64_t k);
void qdot4_q4_0_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out);
void qdot4_q4_1_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out);
void qdot4_q5_0_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out);
void qdot4_q5_1_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out);
void qdot4_q8_0_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out);
void qdot4_q4_k_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out);
void qdot4_q5_k_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out);
void qdot4_q6_k_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out);

}  // namespace oscar::qmat
