// Run-time CPU feature checks for dispatching to the vectorized kernels.
#pragma once

namespace oscar {

// True when the CPU has AVX2, FMA and F16C (every *_avx2.cpp kernel needs all three).
bool cpu_has_avx2();
// Set OSCAR_NO_AVX2=1 to force the scalar references (for testing and comparisons).
bool use_avx2();

}  // namespace oscar
