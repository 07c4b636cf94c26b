// AVX2/F16C F16 / BF16 row dots: four 8-lane FMA chains over 32 elements a step (FMA
// latency hidden), an 8-element step and a zero-padded last step for the tail; the
// two-row kernels run exactly the same chains per x row, so they match the one-row ones.
#include <immintrin.h>

#include <cstring>

#include "oscar/ops/avx2_util.h"
#include "oscar/qmat/fdot.h"

namespace oscar::qmat {
namespace {

struct WidenF16 {
  static __m256 load8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};

// bf16 is the high half of an f32: widening is a shift.
struct WidenBf16 {
  static __m256 load8(const uint8_t* p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
};

// The last r < 8 elements as one more FMA into acc, both operands zero-padded (the padded
// lanes add +0, leaving acc unchanged).
template <class W>
inline __m256 tail_fma(const uint8_t* w, const float* x, int64_t r, __m256 acc) {
  alignas(32) uint8_t wb[16] = {};
  alignas(32) float xb[8] = {};
  std::memcpy(wb, w, size_t(2 * r));
  std::memcpy(xb, x, size_t(4 * r));
  return _mm256_fmadd_ps(W::load8(wb), _mm256_load_ps(xb), acc);
}

template <class W>
float dot1(const void* wv, const float* x, int64_t k) {
  const auto* w = static_cast<const uint8_t*>(wv);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    a0 = _mm256_fmadd_ps(W::load8(w + 2 * i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(W::load8(w + 2 * i + 16), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(W::load8(w + 2 * i + 32), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(W::load8(w + 2 * i + 48), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= k; i += 8) a0 = _mm256_fmadd_ps(W::load8(w + 2 * i), _mm256_loadu_ps(x + i), a0);
  if (i < k) a0 = tail_fma<W>(w + 2 * i, x + i, k - i, a0);
  return hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

template <class W>
void dot2(const void* wv, const float* x0, const float* x1, int64_t k, float* out) {
  const auto* w = static_cast<const uint8_t*>(wv);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    const __m256 w0 = W::load8(w + 2 * i), w1 = W::load8(w + 2 * i + 16);
    const __m256 w2 = W::load8(w + 2 * i + 32), w3 = W::load8(w + 2 * i + 48);
    a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x0 + i), a0);
    b0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x1 + i), b0);
    a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x0 + i + 8), a1);
    b1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x1 + i + 8), b1);
    a2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x0 + i + 16), a2);
    b2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x1 + i + 16), b2);
    a3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x0 + i + 24), a3);
    b3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x1 + i + 24), b3);
  }
  for (; i + 8 <= k; i += 8) {
    const __m256 w0 = W::load8(w + 2 * i);
    a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x0 + i), a0);
    b0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x1 + i), b0);
  }
  if (i < k) {
    a0 = tail_fma<W>(w + 2 * i, x0 + i, k - i, a0);
    b0 = tail_fma<W>(w + 2 * i, x1 + i, k - i, b0);
  }
  out[0] = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  out[1] = hsum8(_mm256_add_ps(_mm256_add_ps(b0, b1), _mm256_add_ps(b2, b3)));
}

}  // namespace

float fdot_f16_avx2(const void* w, const float* x, int64_t k) { return dot1<WidenF16>(w, x, k); }
float fdot_bf16_avx2(const void* w, const float* x, int64_t k) { return dot1<WidenBf16>(w, x, k); }

void fdot2_f16_avx2(const void* w, const float* x0, const float* x1, int64_t k, float* out) {
  dot2<WidenF16>(w, x0, x1, k, out);
}

void fdot2_bf16_avx2(const void* w, const float* x0, const float* x1, int64_t k, float* out) {
  dot2<WidenBf16>(w, x0, x1, k, out);
}

void f16_to_f32_avx2(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, WidenF16::load8(p + 2 * i));
  for (; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, p + 2 * i, 2);
    dst[i] = _cvtsh_ss(bits);
  }
}

}  // namespace oscar::qmat
