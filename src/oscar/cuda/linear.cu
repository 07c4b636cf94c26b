// cuBLAS products of the CUDA backend (linear.h).
#include "oscar/cuda/linear.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <string>

#include "oscar/cuda/gemv.h"
#include "oscar/cuda/host_checks.h"

namespace oscar::cuda {
namespace {

using detail::check_launch;
using detail::check_cuda;
using detail::fail;

constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;  // what cuBLAS asks for on Hopper
constexpr int kThreads = 256;

void check_cublas(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("linear", std::string(call) + ": " + cublasGetStatusString(s));
}

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 65535 * 8 ? b : 65535 * 8);
}

__global__ void cast_kernel(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

__global__ void bias_kernel(float* y, const float* bias, int64_t total, int n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += bias[i % n];
}

}  // namespace

void cast_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  cast_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  check_launch("cast_to_bf16");
}

void add_bias_rows(float* y, const float* bias, int64_t rows, int n, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  bias_kernel<<<blocks_for(rows * n), kThreads, 0, stream>>>(y, bias, rows * n, n);
  check_launch("add_bias_rows");
}

Linear::Linear(cudaStream_t stream, size_t max_in_elems) : stream_(stream), max_in_elems_(max_in_elems) {
  cublasHandle_t h = nullptr;
  check_cublas(cublasCreate(&h), "cublasCreate");
  handle_ = h;
  check_cublas(cublasSetStream(h, stream), "cublasSetStream");
  // Our own workspace: cuBLAS then allocates nothing while a graph is being captured.
  check_cuda(cudaMalloc(&workspace_, kCublasWorkspaceBytes), "cudaMalloc(cuBLAS workspace)");
  check_cublas(cublasSetWorkspace(h, workspace_, kCublasWorkspaceBytes), "cublasSetWorkspace");
  check_cuda(cudaMalloc(&x_bf16_, (max_in_elems ? max_in_elems : 1) * sizeof(uint16_t)), "cudaMalloc(BF16 scratch)");
}

Linear::~Linear() {
  if (handle_) cublasDestroy(handle_);
  cudaFree(workspace_);
  cudaFree(x_bf16_);
}

void Linear::linear(const float* x, const uint16_t* w, const float* bias, float* y, int64_t m, int n_in, int n_out,
                    bool accumulate) {
  if (m <= 0) return;
  if (gemv_supported(m, n_in) && detail::aligned16(x) && detail::aligned16(w))
    return gemv_f32_input(x, w, bias, y, m, n_in, n_out, accumulate, stream_);
  if (size_t(m) * size_t(n_in) > max_in_elems_)
    fail("linear", "input of " + std::to_string(m) + "×" + std::to_string(n_in) + " exceeds the scratch of " +
                       std::to_string(max_in_elems_) + " elements");
  cast_to_bf16(x, x_bf16_, m * n_in, stream_);
  linear_bf16(x_bf16_, w, bias, y, m, n_in, n_out, accumulate);
}

void Linear::linear_bf16(const uint16_t* x, const uint16_t* w, const float* bias, float* y, int64_t m, int n_in,
                         int n_out, bool accumulate) {
  if (m <= 0) return;
  // A decode step's few rows: a read of W at the memory's pace (gemv.h).
  if (gemv_supported(m, n_in) && detail::aligned16(x) && detail::aligned16(w))
    return gemv_bf16(x, w, bias, y, m, n_in, n_out, accumulate, stream_);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // Row-major W [n_out, n_in] is column-major Wᵀ: y (col-major [n_out, m]) = op(W)·xᵀ.
  check_cublas(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, n_out, int(m), n_in, &alpha, w, CUDA_R_16BF, n_in, x,
                            CUDA_R_16BF, n_in, &beta, y, CUDA_R_32F, n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
  if (bias) add_bias_rows(y, bias, m, n_out, stream_);
}

void Linear::linear_f32(const float* x, const float* w, const float* bias, float* y, int64_t m, int n_in, int n_out,
                        bool accumulate) {
  if (m <= 0) return;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // PEDANTIC: f32 arithmetic throughout, never TF32.
  check_cublas(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, n_out, int(m), n_in, &alpha, w, CUDA_R_32F, n_in, x,
                            CUDA_R_32F, n_in, &beta, y, CUDA_R_32F, n_out, CUBLAS_COMPUTE_32F_PEDANTIC,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx(f32)");
  if (bias) add_bias_rows(y, bias, m, n_out, stream_);
}

void Linear::rotate(const float* x, const float* r, float* y, int64_t m, int d, bool transpose_r, bool tf32) {
  if (m <= 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major: yᵀ [d, m] = Rᵀ·xᵀ (row-major R read as its transpose), or R·xᵀ for x·Rᵀ.
  check_cublas(cublasGemmEx(handle_, transpose_r ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, d, int(m), d, &alpha, r,
                            CUDA_R_32F, d, x, CUDA_R_32F, d, &beta, y, CUDA_R_32F, d,
                            tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx(rotation)");
}

}  // namespace oscar::cuda
