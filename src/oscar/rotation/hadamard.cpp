#include "oscar/rotation/hadamard.h"

#include <bit>
#include <cmath>

#include "oscar/core/error.h"
#include "oscar/ops/cpu_features.h"

namespace oscar {

bool is_power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

void hadamard_check_dim(int d) {
  if (!is_power_of_two(d)) fail("Hadamard transform needs a power-of-two dimension, got d = {}", d);
}

namespace {

// Butterflies in Sylvester order: at stride h, (a, b) → (a + b, a − b); log2(d) stages give
// the unnormalized H_d; one final scale by 1/√d normalizes it.
template <typename T>
void fwht_scalar(T* x, int d) {
  for (int h = 1; h < d; h *= 2) {
    for (int i = 0; i < d; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const T a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const T s = T(1) / std::sqrt(T(d));
  for (int i = 0; i < d; ++i) x[i] *= s;
}

template <typename T>
std::vector<T> hadamard_matrix_impl(int d) {
  hadamard_check_dim(d);
  const T s = T(1) / std::sqrt(T(d));
  std::vector<T> h(static_cast<size_t>(d) * static_cast<size_t>(d));
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j)
      h[static_cast<size_t>(i) * static_cast<size_t>(d) + static_cast<size_t>(j)] =
          (std::popcount(static_cast<unsigned>(i & j)) & 1) ? -s : s;
  return h;
}

}  // namespace

void hadamard_transform_ref(float* x, int d) { fwht_scalar(x, d); }

void hadamard_transform(float* x, int d) {
  hadamard_check_dim(d);
  if (d >= 8 && use_avx2()) return hadamard_transform_avx2(x, d);
  hadamard_transform_ref(x, d);
}

void hadamard_transform(double* x, int d) {
  hadamard_check_dim(d);
  fwht_scalar(x, d);
}

void hadamard_transform_rows(float* x, int64_t n_rows, int d) {
  hadamard_check_dim(d);
  const bool avx2 = d >= 8 && use_avx2();
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * d;
    if (avx2) {
      hadamard_transform_avx2(row, d);
    } else {
      hadamard_transform_ref(row, d);
    }
  }
}

std::vector<float> hadamard_matrix(int d) { return hadamard_matrix_impl<float>(d); }
std::vector<double> hadamard_matrix_f64(int d) { return hadamard_matrix_impl<double>(d); }

}  // namespace oscar
