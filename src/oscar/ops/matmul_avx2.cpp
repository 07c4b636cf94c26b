// AVX2/FMA matrix-vector rows: four weight rows share each load of x.
#include <immintrin.h>

#include "oscar/ops/avx2_util.h"

#include "oscar/ops/matmul.h"

namespace oscar {

namespace {
inline float dot_tail(const float* a, const float* b, int64_t p, int64_t k) {
  float acc = 0.0f;
  for (; p < k; ++p) acc += a[p] * b[p];
  return acc;
}
}  // namespace

void matvec_rows_avx2(const float* x, const float* w, float* y, int64_t k, int64_t n0, int64_t n1) {
  const int64_t k8 = k & ~int64_t(7);
  int64_t j = n0;
  for (; j + 4 <= n1; j += 4) {
    const float* w0 = w + j * k;
    const float* w1 = w0 + k;
    const float* w2 = w1 + k;
    const float* w3 = w2 + k;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int64_t p = 0; p < k8; p += 8) {
      const __m256 xv = _mm256_loadu_ps(x + p);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + p), xv, a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + p), xv, a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + p), xv, a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + p), xv, a3);
    }
    y[j] = hsum8(a0) + dot_tail(x, w0, k8, k);
    y[j + 1] = hsum8(a1) + dot_tail(x, w1, k8, k);
    y[j + 2] = hsum8(a2) + dot_tail(x, w2, k8, k);
    y[j + 3] = hsum8(a3) + dot_tail(x, w3, k8, k);
  }
  for (; j < n1; ++j) {
    const float* wr = w + j * k;
    __m256 a = _mm256_setzero_ps();
    for (int64_t p = 0; p < k8; p += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(wr + p), _mm256_loadu_ps(x + p), a);
    y[j] = hsum8(a) + dot_tail(x, wr, k8, k);
  }
}

// Two weight rows × four x rows per pass: 8 accumulators, each the same single-register
// FMA chain over k that matvec_rows_avx2 runs for that (row, column), so every output is
// bit-identical to the one-vector kernel. The two weight rows stay in L1 across the x blocks.
void matmul_rows_avx2(const float* x, int64_t m, const float* w, float* y, int64_t k, int64_t n, int64_t n0,
                      int64_t n1) {
  const int64_t k8 = k & ~int64_t(7);
  int64_t j = n0;
  for (; j + 2 <= n1; j += 2) {
    const float* w0 = w + j * k;
    const float* w1 = w0 + k;
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      const float* x0 = x + i * k;
      const float* x1 = x0 + k;
      const float* x2 = x1 + k;
      const float* x3 = x2 + k;
      __m256 a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps(), a10 = _mm256_setzero_ps(), a11 = _mm256_setzero_ps();
      __m256 a20 = _mm256_setzero_ps(), a21 = _mm256_setzero_ps(), a30 = _mm256_setzero_ps(), a31 = _mm256_setzero_ps();
      for (int64_t p = 0; p < k8; p += 8) {
        const __m256 wv0 = _mm256_loadu_ps(w0 + p), wv1 = _mm256_loadu_ps(w1 + p);
        __m256 xv = _mm256_loadu_ps(x0 + p);
        a00 = _mm256_fmadd_ps(wv0, xv, a00);
        a01 = _mm256_fmadd_ps(wv1, xv, a01);
        xv = _mm256_loadu_ps(x1 + p);
        a10 = _mm256_fmadd_ps(wv0, xv, a10);
        a11 = _mm256_fmadd_ps(wv1, xv, a11);
        xv = _mm256_loadu_ps(x2 + p);
        a20 = _mm256_fmadd_ps(wv0, xv, a20);
        a21 = _mm256_fmadd_ps(wv1, xv, a21);
        xv = _mm256_loadu_ps(x3 + p);
        a30 = _mm256_fmadd_ps(wv0, xv, a30);
        a31 = _mm256_fmadd_ps(wv1, xv, a31);
      }
      y[i * n + j] = hsum8(a00) + dot_tail(x0, w0, k8, k);
      y[i * n + j + 1] = hsum8(a01) + dot_tail(x0, w1, k8, k);
      y[(i + 1) * n + j] = hsum8(a10) + dot_tail(x1, w0, k8, k);
      y[(i + 1) * n + j + 1] = hsum8(a11) + dot_tail(x1, w1, k8, k);
      y[(i + 2) * n + j] = hsum8(a20) + dot_tail(x2, w0, k8, k);
      y[(i + 2) * n + j + 1] = hsum8(a21) + dot_tail(x2, w1, k8, k);
      y[(i + 3) * n + j] = hsum8(a30) + dot_tail(x3, w0, k8, k);
      y[(i + 3) * n + j + 1] = hsum8(a31) + dot_tail(x3, w1, k8, k);
    }
    for (; i < m; ++i) matvec_rows_avx2(x + i * k, w, y + i * n, k, j, j + 2);
  }
  if (j < n1)
    for (int64_t i = 0; i < m; ++i) matvec_rows_avx2(x + i * k, w, y + i * n, k, j, n1);
}

}  // namespace oscar
