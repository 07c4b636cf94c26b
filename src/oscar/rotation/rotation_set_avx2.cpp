// AVX2 y = x·R for one row: output columns in blocks of 64 (8 independent FMA chains,
// enough to hide FMA latency), each block streaming the matching 64 columns of every row of R.
#include <immintrin.h>

#include "oscar/rotation/rotation_set.h"

namespace oscar {

void rotate_row_avx2(const float* R, int d, const float* x, float* y) {
  if (d % 8 != 0) return rotate_row_ref(R, d, x, y);
  int j0 = 0;
  for (; j0 + 64 <= d; j0 += 64) {
    __m256 acc[8];
    for (__m256& a : acc) a = _mm256_setzero_ps();
    for (int i = 0; i < d; ++i) {
      const __m256 xi = _mm256_broadcast_ss(x + i);
      const float* row = R + static_cast<int64_t>(i) * d + j0;
      for (int b = 0; b < 8; ++b) acc[b] = _mm256_fmadd_ps(xi, _mm256_loadu_ps(row + 8 * b), acc[b]);
    }
    for (int b = 0; b < 8; ++b) _mm256_storeu_ps(y + j0 + 8 * b, acc[b]);
  }
  for (; j0 < d; j0 += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < d; ++i)
      acc = _mm256_fmadd_ps(_mm256_broadcast_ss(x + i), _mm256_loadu_ps(R + static_cast<int64_t>(i) * d + j0), acc);
    _mm256_storeu_ps(y + j0, acc);
  }
}

}  // namespace oscar
