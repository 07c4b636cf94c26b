// The matrix products of the CUDA backend, through cuBLAS: y = x·Wᵀ (+ b) for BF16 weight
// matrices W [n_out, n_in] (row-major, as oscar::ModelWeights stores them) with f32
// activations (cast to BF16 for the tensor cores; f32 accumulation and output), and the
// f32 product y = x·R with a d×d rotation (queries by R_K, outputs by R_Vᵀ).
//
// Self-contained like decode_attention.h: depends on the CUDA runtime and cuBLAS only.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

struct cublasContext;

namespace oscar::cuda {

// One cuBLAS handle bound to a stream, with its own workspace (so that products can be
// captured in a CUDA graph) and a BF16 scratch for the cast activations.
class Linear {
 public:
  // max_in_elems: the most elements of any x passed to linear() (m · n_in).
  Linear(cudaStream_t stream, size_t max_in_elems);
  Linear(const Linear&) = delete;
  Linear& operator=(const Linear&) = delete;
  ~Linear();

  // y [m, n_out] = x [m, n_in] · Wᵀ + bias (bias [n_out] f32 or null). W: BF16 bits.
  // accumulate: y += x · Wᵀ instead (a residual add in the product's epilogue).
  void linear(const float* x, const uint16_t* w, const float* bias, float* y, int64_t m, int n_in, int n_out,
              bool accumulate = false);
  // The same with x already BF16 bits (made by the kernel before, e.g. rmsnorm's y_bf16).
  void linear_bf16(const uint16_t* x, const uint16_t* w, const float* bias, float* y, int64_t m, int n_in, int n_out,
                   bool accumulate = false);
  // The same product in f32 throughout (W f32 [n_out, n_in]; no TF32): the CPU engine's
  // arithmetic, for end-to-end comparisons.
  void linear_f32(const float* x, const float* w, const float* bias, float* y, int64_t m, int n_in, int n_out,
                  bool accumulate = false);
  // y [m, d] = x [m, d] · R (R [d, d] row-major f32); x and y must not overlap.
  // transpose_r: y = x · Rᵀ instead (un-rotating by an orthogonal R).
  // tf32: the product on the tensor cores with TF32 inputs (10-bit mantissas), for rows that
  // are rounded to BF16 (8 bits) right after; else full f32.
  void rotate(const float* x, const float* r, float* y, int64_t m, int d, bool transpose_r = false, bool tf32 = false);

  cudaStream_t stream() const { return stream_; }

 private:
  cudaStream_t stream_;
  cublasContext* handle_ = nullptr;
  void* workspace_ = nullptr;
  uint16_t* x_bf16_ = nullptr;
  size_t max_in_elems_ = 0;
};

// y[i] = BF16 bits of x[i] (round to nearest even).
void cast_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream = nullptr);
// y [rows, n] += bias [n] on every row.
void add_bias_rows(float* y, const float* bias, int64_t rows, int n, cudaStream_t stream = nullptr);

}  // namespace oscar::cuda
