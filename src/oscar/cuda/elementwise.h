// The per-token layer ops of the CUDA backend, each the GPU twin of a CPU op (same formula,
// same conventions): RMSNorm (src/oscar/ops/norm.h), RoPE (ops/rope.h), SwiGLU and the
// residual add (ops/activation.h), the embedding lookup from a BF16 table, and greedy
// sampling (sampling's argmax: the first maximum wins). All f32 activations, device
// pointers, launched on `stream`; invalid sizes throw std::runtime_error naming the field.
//
// Self-contained like decode_attention.h: depends on the CUDA runtime only.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace oscar::cuda {

// y[r] = x[r] / sqrt(mean(x[r]²) + eps) · w, rows of n (x and y may alias); the mean of
// squares is summed in double, as on the CPU. y_bf16 (optional): y again as BF16 bits, the
// input of the next matrix product.
void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int n, float eps, cudaStream_t stream = nullptr,
             uint16_t* y_bf16 = nullptr);

// Rotates x [n_tokens, n_heads, head_dim] in place, token i at position pos[i]: pairs
// (i, i + d/2) (neox) or (2i, 2i + 1) (interleaved) by angle pos·position_scale·inv_freq[i],
// the angle formed and its cos/sin taken in double. inv_freq: device [head_dim / 2].
void rope(float* x, const int32_t* pos, const double* inv_freq, double position_scale, bool interleaved,
          int64_t n_tokens, int n_heads, int head_dim, cudaStream_t stream = nullptr);

// gate[i] = silu(gate[i]) · up[i] = gate / (1 + e^-gate) · up; out_bf16 (optional): the
// result again as BF16 bits.
void swiglu(float* gate, const float* up, int64_t n, cudaStream_t stream = nullptr, uint16_t* out_bf16 = nullptr);

// y[i] += x[i].
void add_inplace(float* y, const float* x, int64_t n, cudaStream_t stream = nullptr);

// out [n_tokens, dim] = BF16 rows table[ids[i]] as f32; ids outside [0, vocab) give zeros
// and set *bad_id (device int, left alone otherwise) to 1 so the caller can refuse them.
void embed_bf16(const uint16_t* table, int64_t vocab, int dim, const int32_t* ids, int64_t n_tokens, float* out,
                int32_t* bad_id, cudaStream_t stream = nullptr);

// ids[r] = argmax of logits row r (rows of n): the first maximum wins; NaN never wins.
void argmax_rows(const float* logits, int64_t rows, int64_t n, int32_t* ids, cudaStream_t stream = nullptr);

}  // namespace oscar::cuda
