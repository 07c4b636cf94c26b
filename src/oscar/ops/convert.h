// Bulk f32 <-> bf16 conversion (KV cache writes and reads).
#pragma once
#include <cstdint>

#include "oscar/core/dtype.h"

namespace oscar {

void f32_to_bf16_ref(const float* x, bf16* y, int64_t n);
void bf16_to_f32_ref(const bf16* x, float* y, int64_t n);
void f32_to_bf16_avx2(const float* x, bf16* y, int64_t n);
void bf16_to_f32_avx2(const bf16* x, float* y, int64_t n);
// Dispatching versions.
void f32_to_bf16(const float* x, bf16* y, int64_t n);
void bf16_to_f32(const bf16* x, float* y, int64_t n);

}  // namespace oscar
