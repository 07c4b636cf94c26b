#include "oscar/ops/matmul.h"

#include <cblas.h>

#include "oscar/core/thread_pool.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {

void matmul_ref(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t k, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias ? bias[j] : 0.0;
      for (int64_t p = 0; p < k; ++p) acc += double(x[i * k + p]) * double(w[j * k + p]);
      y[i * n + j] = float(acc);
    }
  }
}

void matvec_rows_ref(const float* x, const float* w, float* y, int64_t k, int64_t n0, int64_t n1) {
  for (int64_t j = n0; j < n1; ++j) {
    float acc = 0.0f;
    for (int64_t p = 0; p < k; ++p) acc += x[p] * w[j * k + p];
    y[j] = acc;
  }
}

void matmul_rows_ref(const float* x, int64_t m, const float* w, float* y, int64_t k, int64_t n, int64_t n0,
                     int64_t n1) {
  for (int64_t i = 0; i < m; ++i) matvec_rows_ref(x + i * k, w, y + i * n, k, n0, n1);
}

void matmul_decode(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t k, int64_t n) {
  if (m == 1) return matmul(x, w, bias, y, m, k, n);
  const bool avx2 = use_avx2();
  default_pool().parallel_for(n, 64, [&](int64_t n0, int64_t n1) {
    if (avx2) {
      matmul_rows_avx2(x, m, w, y, k, n, n0, n1);
    } else {
      matmul_rows_ref(x, m, w, y, k, n, n0, n1);
    }
    if (bias)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = n0; j < n1; ++j) y[i * n + j] += bias[j];
  });
}

void matmul(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t k, int64_t n) {
  if (m == 1) {
    const bool avx2 = use_avx2();
    // 64 rows per grain keeps each chunk's weight slice (64·k floats) streaming.
    default_pool().parallel_for(n, 64, [&](int64_t n0, int64_t n1) {
      if (avx2) {
        matvec_rows_avx2(x, w, y, k, n0, n1);
      } else {
        matvec_rows_ref(x, w, y, k, n0, n1);
      }
      if (bias)
        for (int64_t j = n0; j < n1; ++j) y[j] += bias[j];
    });
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n), int(k), 1.0f, x, int(k), w, int(k), 0.0f, y,
              int(n));
  if (bias)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) y[i * n + j] += bias[j];
}

}  // namespace oscar
