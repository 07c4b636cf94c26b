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

}  // namespace oscar
