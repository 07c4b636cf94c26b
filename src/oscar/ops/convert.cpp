#include "oscar/ops/convert.h"

#include "oscar/ops/cpu_features.h"

namespace oscar {

void f32_to_bf16_ref(const float* x, bf16* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

void bf16_to_f32_ref(const bf16* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

void f32_to_bf16(const float* x, bf16* y, int64_t n) {
  if (use_avx2()) return f32_to_bf16_avx2(x, y, n);
  f32_to_bf16_ref(x, y, n);
}

void bf16_to_f32(const bf16* x, float* y, int64_t n) {
  if (use_avx2()) return bf16_to_f32_avx2(x, y, n);
  bf16_to_f32_ref(x, y, n);
}

}  // namespace oscar
