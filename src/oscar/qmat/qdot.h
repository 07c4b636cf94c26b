// Dot products between one weight row kept in its GGUF block format and an activation
// row quantized to 8 bits, as llama.cpp-style integer kernels do them: the weight row is
// read in its own bytes (4–8× fewer than f32), the arithmetic is integer inside a block
// and f32 across blocks. A scalar reference sits beside every AVX2 kernel.
//
// Two activation formats: blocks of 32 (ActQ8Block) for the legacy quants, and super-blocks
// of 256 (ActQ8KBlock) for the K-quants, whose kernels then sum in int32 over a whole
// super-block and touch f32 once per super-block instead of once per 32-element sub-block.
#pragma once
#include <cstdint>

#include "oscar/formats/ggml_type.h"

namespace oscar::qmat {

// Which activation blocks a weight format's kernels take: q8 (ActQ8Block) for Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0; q8_k (ActQ8KBlock) for Q4_K, Q5_K, Q6_K; none for a type without
// qdot kernels.
enum class ActFormat { none, q8, q8_k };
ActFormat qdot_act_format(GgmlType t);

// Activations for the legacy quants are quantized in blocks of 32, their weight block.
constexpr int64_t act_block = 32;

// One block of 32 activations: x[i] ≈ d·q[i]; sum = d·Σq[i], the term that a weight
// format with a minimum (Q4_1, Q5_1) multiplies by its minimum.
struct ActQ8Block {
  float d;        // max|x| / 127; 0 for an all-zero block
  float sum;      // d · Σ q[i]
  int8_t q[32];   // round-to-nearest-even of x[i] / d, in [-127, 127]
};

// Quantizes k activations (k a multiple of 32) into k / 32 blocks. The AVX2 version gives
// the same bytes as the reference (same scale, same rounding: x · (1/d), nearest even).
void quantize_act_ref(const float* x, ActQ8Block* out, int64_t k);
void quantize_act_avx2(const float* x, ActQ8Block* out, int64_t k);

// Activations for the K-quants are quantized in super-blocks of 256, their weight block.
constexpr int64_t act_k_block = 256;

// One super-block of 256 activations: x[i] ≈ d·q[i], with the integer sums of q per 16
// elements. Per 16 (not 32) because Q6_K's scales are per 16: its −32 offset becomes
// 32·Σ_g sc_g·bsums[g]; Q4_K / Q5_K's per-32 mins take bsums in pairs (one madd with each
// min repeated twice). |bsums| ≤ 16·127 = 2032 fits int16, which is what the madd needs.
// The price of one scale per 256: a loud element coarsens the step of its 255 neighbours
// (blocks of 32 confined that to 31), the trade llama.cpp's K-quant CPU kernels make too.
// On Qwen2.5-Coder-1.5B Q4_K_M (3 × 512 tokens of the held-out novel, f32 KV), the KL
// divergence from the f32-activation path (--weights f32) went from 0.0005 (blocks of 32)
// to 0.0026, same top-1 from 99.2 % to 97.1 %, PPL ratio 0.999 → 1.001.
struct ActQ8KBlock {
  float d;             // max|x| / 127 over the 256; 0 for an all-zero super-block
  int8_t q[256];       // round-to-nearest-even of x[i] / d, in [-127, 127]
  int16_t bsums[16];   // bsums[g] = Σ q[16g .. 16g + 15]
};

// Elements per activation block of type Act: 32 (ActQ8Block) or 256 (ActQ8KBlock).
template <class Act>
constexpr int64_t act_block_elements = int64_t(sizeof(Act::q));

// Quantizes k activations (k a multiple of 256) into k / 256 super-blocks, with the same
// rounding rule as quantize_act; the AVX2 version gives the reference's bytes.
void quantize_act_k_ref(const float* x, ActQ8KBlock* out, int64_t k);
void quantize_act_k_avx2(const float* x, ActQ8KBlock* out, int64_t k);

// Σ_i w[i]·x[i] over one weight row of k elements (k a multiple of the format's block:
// 32 for Q4_0 … Q8_0, 256 for the K-quants) against its quantized activation row, in the
// format's ActFormat.
template <class Act>
using QDotOf = float (*)(const void* w_row, const Act* x, int64_t k);
using QDotFn = QDotOf<ActQ8Block>;
using QDotKFn = QDotOf<ActQ8KBlock>;

// Four activation rows (x, x + x_stride, x + 2·x_stride, x + 3·x_stride blocks) against
// one weight row: out[i] is bit-identical to the one-row AVX2 kernel on row i (each sum is
// formed in the same order), with every weight block unpacked once for the four. Scalar
// reference: four calls of the one-row kernel.
template <class Act>
using QDot4Of = void (*)(const void* w_row, const Act* x, int64_t x_stride, int64_t k, float* out);
using QDot4Fn = QDot4Of<ActQ8Block>;
using QDot4KFn = QDot4Of<ActQ8KBlock>;

// The kernels of a q8 format (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0); nullptr for any other type
// (the four-row table also for a q8 format without a four-row kernel).
QDotFn qdot_ref_kernel(GgmlType t);
QDotFn qdot_avx2_kernel(GgmlType t);
QDot4Fn qdot4_avx2_kernel(GgmlType t);

// The kernels of a q8_k format (Q4_K, Q5_K, Q6_K); nullptr for any other type.
QDotKFn qdot_k_ref_kernel(GgmlType t);
QDotKFn qdot_k_avx2_kernel(GgmlType t);
QDot4KFn qdot4_k_avx2_kernel(GgmlType t);

// The per-format kernels behind the tables.
float qdot_q4_0_ref(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q4_1_ref(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q5_0_ref(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q5_1_ref(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q8_0_ref(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q4_k_ref(const void* w, const ActQ8KBlock* x, int64_t k);
float qdot_q5_k_ref(const void* w, const ActQ8KBlock* x, int64_t k);
float qdot_q6_k_ref(const void* w, const ActQ8KBlock* x, int64_t k);
float qdot_q4_0_avx2(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q4_1_avx2(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q5_0_avx2(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q5_1_avx2(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q8_0_avx2(const void* w, const ActQ8Block* x, int64_t k);
float qdot_q4_k_avx2(const void* w, const ActQ8KBlock* x, int64_t k);
float qdot_q5_k_avx2(const void* w, const ActQ8KBlock* x, int64_t k);
float qdot_q6_k_avx2(const void* w, const ActQ8KBlock* x, int64_t k);
void qdot4_q4_0_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out);
void qdot4_q4_1_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out);
void qdot4_q5_0_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out);
void qdot4_q5_1_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out);
void qdot4_q8_0_avx2(const void* w, const ActQ8Block* x, int64_t xs, int64_t k, float* out);
void qdot4_q4_k_avx2(const void* w, const ActQ8KBlock* x, int64_t xs, int64_t k, float* out);
void qdot4_q5_k_avx2(const void* w, const ActQ8KBlock* x, int64_t xs, int64_t k, float* out);
void qdot4_q6_k_avx2(const void* w, const ActQ8KBlock* x, int64_t xs, int64_t k, float* out);

}  // namespace oscar::qmat
