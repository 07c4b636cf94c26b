// The matrix product of a decode step with few rows: y [m, n_out] = x [m, n_in] · Wᵀ (+ b)
// for m ≤ kGemvMaxRows, BF16 W and x, f32 sums. A decode step at batch 1 streams every
// weight once and does almost no arithmetic per byte, so the product is a read of W at the
// memory's pace: one warp per output row, 16-byte loads, four in flight per lane, each
// weight read once for all m rows, the bias and the residual add in the epilogue (cuBLAS
// splits such products over K and reduces in a second kernel). Each launch is a
// programmatic dependent of the kernel before it (launch.h): its CTAs are scheduled while
// that kernel drains.
//
// Self-contained: the CUDA runtime only.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace oscar::cuda {

inline constexpr int kGemvMaxRows = 4;

// Whether gemv_bf16 takes this shape: 1 ≤ m ≤ kGemvMaxRows and n_in a multiple of 8
// (16-byte rows); pointers must be 16-byte aligned.
bool gemv_supported(int64_t m, int n_in);

// y [m, n_out] (f32; += when accumulate) = x [m, n_in] (BF16 bits) · Wᵀ (W [n_out, n_in]
// BF16 bits, row-major) + bias [n_out] (f32, or null). Throws std::runtime_error for an
// unsupported shape or a failed launch.
void gemv_bf16(const uint16_t* x, const uint16_t* w, const float* bias, float* y, int64_t m, int n_in, int n_out,
               bool accumulate, cudaStream_t stream);

// The same with x in f32, each value rounded to BF16 as it is read (cast_to_bf16, then
// gemv_bf16, in one kernel).
void gemv_f32_input(const float* x, const uint16_t* w, const float* bias, float* y, int64_t m, int n_in, int n_out,
                    bool accumulate, cudaStream_t stream);

}  // namespace oscar::cuda
