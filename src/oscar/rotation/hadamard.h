// Normalized Sylvester Hadamard matrix H_d (d a power of two) and the fast Walsh–Hadamard
// transform that multiplies a row by it in O(d log d). H is symmetric and orthogonal,
// so x·H = H·x and H·H = I: the transform is its own inverse.
//   H_1 = [1],  H_2n = [[H_n, H_n], [H_n, −H_n]] / √2,  i.e.  H[i][j] = (−1)^popcount(i & j) / √d.
#pragma once
#include <cstdint>
#include <vector>

namespace oscar {

// True for 1, 2, 4, 8, …
bool is_power_of_two(int64_t n);

// Throws oscar::Error naming d unless d is a power of two (d ≥ 1).
void hadamard_check_dim(int d);

// x [d] ← x·H_d, in place. The dispatching version checks d and picks AVX2 when it can.
void hadamard_transform(float* x, int d);
void hadamard_transform_ref(float* x, int d);   // scalar reference (no check of d)
void hadamard_transform_avx2(float* x, int d);  // d < 8 falls back to the reference
// float64 version (calibration math): x [d] ← x·H_d.
void hadamard_transform(double* x, int d);

// x [n_rows, d] row-major: every row ← row·H_d.
void hadamard_transform_rows(float* x, int64_t n_rows, int d);

// The explicit matrix [d, d] row-major (tests, and rotations stored as matrices).
std::vector<float> hadamard_matrix(int d);
std::vector<double> hadamard_matrix_f64(int d);

}  // namespace oscar
