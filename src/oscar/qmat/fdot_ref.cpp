// Scalar F16 / BF16 row dots (the references behind OSCAR_NO_AVX2) and the kernel tables
// of fdot.h (kept here, in a file built without -mavx2, so they run on any CPU).
#include <cstring>

#include "oscar/core/dtype.h"
#include "oscar/qmat/fdot.h"

namespace oscar::qmat {
namespace {

template <typename Widen>
float dot_16(const void* w, const float* x, int64_t k, Widen widen) {
  const auto* p = static_cast<const uint8_t*>(w);
  float acc = 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    uint16_t bits;
    std::memcpy(&bits, p + 2 * i, 2);
    acc += widen(bits) * x[i];
  }
  return acc;
}

float widen_f16(uint16_t b) { return fp16_to_f32(fp16{b}); }
float widen_bf16(uint16_t b) { return bf16_to_f32(bf16{b}); }

}  // namespace

float fdot_f16_ref(const void* w, const float* x, int64_t k) { return dot_16(w, x, k, widen_f16); }
float fdot_bf16_ref(const void* w, const float* x, int64_t k) { return dot_16(w, x, k, widen_bf16); }

void fdot2_f16_ref(const void* w, const float* x0, const float* x1, int64_t k, float* out) {
  out[0] = fdot_f16_ref(w, x0, k);
  out[1] = fdot_f16_ref(w, x1, k);
}

void fdot2_bf16_ref(const void* w, const float* x0, const float* x1, int64_t k, float* out) {
  out[0] = fdot_bf16_ref(w, x0, k);
  out[1] = fdot_bf16_ref(w, x1, k);
}

FDotFn fdot_ref_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::f16: return fdot_f16_ref;
    case GgmlType::bf16: return fdot_bf16_ref;
    default: return nullptr;
  }
}

FDotFn fdot_avx2_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::f16: return fdot_f16_avx2;
    case GgmlType::bf16: return fdot_bf16_avx2;
    default: return nullptr;
  }
}

FDot2Fn fdot2_ref_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::f16: return fdot2_f16_ref;
    case GgmlType::bf16: return fdot2_bf16_ref;
    default: return nullptr;
  }
}

FDot2Fn fdot2_avx2_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::f16: return fdot2_f16_avx2;
    case GgmlType::bf16: return fdot2_bf16_avx2;
    default: return nullptr;
  }
}

}  // namespace oscar::qmat
