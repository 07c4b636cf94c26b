// AVX2 kernels of the uniform KV codec. The "parts" packing makes any 8 consecutive code
// bytes of a group expand to k = 8/bits runs of 8 consecutive dims (offsets j + s·P),
// so one cvtepu8 → shift → mask → cvt per run feeds an FMA with 8 contiguous floats of q.
#include <immintrin.h>

#include <cstring>

#include "oscar/kv/quant_codec.h"
#include "oscar/ops/avx2_util.h"

namespace oscar {
namespace {

inline void load_group_params(const uint8_t* params, int g, float* s, float* z) {
  uint16_t sz[2];
  std::memcpy(sz, params + size_t(g) * 4, 4);
  *s = _cvtsh_ss(sz[0]);
  *z = _cvtsh_ss(sz[1]);
}

// 8 codes of part s from 8 expanded bytes.
template <int BITS>
inline __m256 codes_f32(__m256i v, int s) {
  const __m256i mask = _mm256_set1_epi32((1 << BITS) - 1);
  return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, s * BITS), mask));  // s is unrolled
}

inline __m256i load8_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Σ_i q_i·code_i over one packing group of n dims, as a vector of 8 partial sums.
template <int BITS>
inline __m256 dot_codes_vec(int n, const float* q, const uint8_t* packed) {
  constexpr int K = 8 / BITS;
  const int part = n / K;
  __m256 acc[K];
  for (int s = 0; s < K; ++s) acc[s] = _mm256_setzero_ps();
  for (int j = 0; j < part; j += 8) {
    const __m256i v = load8_u8(packed + j);
    for (int s = 0; s < K; ++s) acc[s] = _mm256_fmadd_ps(codes_f32<BITS>(v, s), _mm256_loadu_ps(q + j + s * part), acc[s]);
  }
  __m256 t = acc[0];
  for (int s = 1; s < K; ++s) t = _mm256_add_ps(t, acc[s]);
  return t;
}

template <int BITS>
void dequantize_impl(const QuantParams& p, const uint8_t* in, float* x) {
  constexpr int K = 8 / BITS;
  const int G = p.group, part = G / K;
  const uint8_t* params = in + quant_code_bytes(p);
  for (int g = 0; g < p.head_dim / G; ++g) {
    float s, z;
    load_group_params(params, g, &s, &z);
    const __m256 vs = _mm256_set1_ps(s), vz = _mm256_set1_ps(z);
    const uint8_t* codes = in + size_t(g) * part;
    float* xg = x + g * G;
    for (int j = 0; j < part; j += 8) {
      const __m256i v = load8_u8(codes + j);
      for (int s2 = 0; s2 < K; ++s2)  // (code − z)·s, as the reference: bit-exact
        _mm256_storeu_ps(xg + j + s2 * part, _mm256_mul_ps(_mm256_sub_ps(codes_f32<BITS>(v, s2), vz), vs));
    }
  }
}

// qsum[g] = Σ q over group g.
void group_sums(const QuantParams& p, const float* q, float* qsum) {
  const int G = p.group;
  for (int g = 0; g < p.head_dim / G; ++g) {
    __m256 a = _mm256_setzero_ps();
    for (int i = 0; i < G; i += 8) a = _mm256_add_ps(a, _mm256_loadu_ps(q + g * G + i));
    qsum[g] = hsum8(a);
  }
}

template <int BITS>
inline float dot_impl(const QuantParams& p, const float* q, const float* qsum, const uint8_t* row) {
  const int G = p.group, part_bytes = G * BITS / 8;
  const uint8_t* params = row + quant_code_bytes(p);
  __m256 tot = _mm256_setzero_ps();
  float off = 0.0f;
  for (int g = 0; g < p.head_dim / G; ++g) {
    float s, z;
    load_group_params(params, g, &s, &z);
    tot = _mm256_fmadd_ps(dot_codes_vec<BITS>(G, q + g * G, row + size_t(g) * part_bytes), _mm256_set1_ps(s), tot);
    off += s * z * qsum[g];
  }
  return hsum8(tot) - off;
}

template <int BITS>
inline void axpy_impl(const QuantParams& p, float a, const uint8_t* row, float* acc) {
  constexpr int K = 8 / BITS;
  const int G = p.group, part = G / K;
  const uint8_t* params = row + quant_code_bytes(p);
  for (int g = 0; g < p.head_dim / G; ++g) {
    float s, z;
    load_group_params(params, g, &s, &z);
    const __m256 alpha = _mm256_set1_ps(a * s), beta = _mm256_set1_ps(-a * s * z);  // a·x̂ = α·code + β
    const uint8_t* codes = row + size_t(g) * part;
    float* ag = acc + g * G;
    for (int j = 0; j < part; j += 8) {
      const __m256i v = load8_u8(codes + j);
      for (int s2 = 0; s2 < K; ++s2) {
        float* o = ag + j + s2 * part;
        _mm256_storeu_ps(o, _mm256_fmadd_ps(codes_f32<BITS>(v, s2), alpha, _mm256_add_ps(_mm256_loadu_ps(o), beta)));
      }
    }
  }
}

// Accumulates several rows into one 8·K-wide slice of acc held in registers: for a slice
// of one group, loop over the rows. acc is loaded and stored once per slice instead of
// once per row.
template <int BITS>
void axpy_rows_impl(const QuantParams& p, const float* a, const uint8_t* rows, size_t stride, int64_t n, float* acc) {
  constexpr int K = 8 / BITS;
  const int G = p.group, part = G / K;
  const size_t code_bytes = quant_code_bytes(p);
  for (int g = 0; g < p.head_dim / G; ++g) {
    for (int j = 0; j < part; j += 8) {
      __m256 r[K];
      float* ag = acc + g * G + j;
      for (int s = 0; s < K; ++s) r[s] = _mm256_loadu_ps(ag + s * part);
      __m256 bias = _mm256_setzero_ps();  // Σ_r −a_r·s_r·z_r, the same for every dim of the group
      for (int64_t t = 0; t < n; ++t) {
        const uint8_t* row = rows + size_t(t) * stride;
        float s, z;
        load_group_params(row + code_bytes, g, &s, &z);
        const __m256 alpha = _mm256_set1_ps(a[t] * s);
        bias = _mm256_add_ps(bias, _mm256_set1_ps(-a[t] * s * z));
        const __m256i v = load8_u8(row + size_t(g) * part + j);
        for (int s2 = 0; s2 < K; ++s2) r[s2] = _mm256_fmadd_ps(codes_f32<BITS>(v, s2), alpha, r[s2]);
      }
      for (int s = 0; s < K; ++s) _mm256_storeu_ps(ag + s * part, _mm256_add_ps(r[s], bias));
    }
  }
}

}  // namespace

void dequantize_row_avx2(const QuantParams& p, const uint8_t* in, float* x) {
  switch (p.bits) {
    case 2: return dequantize_impl<2>(p, in, x);
    case 4: return dequantize_impl<4>(p, in, x);
    default: return dequantize_impl<8>(p, in, x);
  }
}

float dot_row_avx2(const QuantParams& p, const float* q, const uint8_t* row) {
  float qsum[kQuantMaxHeadDim / 32];
  group_sums(p, q, qsum);
  switch (p.bits) {
    case 2: return dot_impl<2>(p, q, qsum, row);
    case 4: return dot_impl<4>(p, q, qsum, row);
    default: return dot_impl<8>(p, q, qsum, row);
  }
}

void dot_rows_avx2(const QuantParams& p, const float* q, const uint8_t* rows, size_t row_stride, int64_t n_rows,
                   float* out) {
  float qsum[kQuantMaxHeadDim / 32];
  group_sums(p, q, qsum);
  switch (p.bits) {
    case 2:
      for (int64_t r = 0; r < n_rows; ++r) out[r] = dot_impl<2>(p, q, qsum, rows + size_t(r) * row_stride);
      return;
    case 4:
      for (int64_t r = 0; r < n_rows; ++r) out[r] = dot_impl<4>(p, q, qsum, rows + size_t(r) * row_stride);
      return;
    default:
      for (int64_t r = 0; r < n_rows; ++r) out[r] = dot_impl<8>(p, q, qsum, rows + size_t(r) * row_stride);
      return;
  }
}

void axpy_row_avx2(const QuantParams& p, float a, const uint8_t* row, float* acc) {
  switch (p.bits) {
    case 2: return axpy_impl<2>(p, a, row, acc);
    case 4: return axpy_impl<4>(p, a, row, acc);
    default: return axpy_impl<8>(p, a, row, acc);
  }
}

void axpy_rows_avx2(const QuantParams& p, const float* a, const uint8_t* rows, size_t row_stride, int64_t n_rows,
                    float* acc) {
  switch (p.bits) {
    case 2: return axpy_rows_impl<2>(p, a, rows, row_stride, n_rows, acc);
    case 4: return axpy_rows_impl<4>(p, a, rows, row_stride, n_rows, acc);
    default: return axpy_rows_impl<8>(p, a, rows, row_stride, n_rows, acc);
  }
}

float dot_codes_avx2(int bits, int n, const float* q, const uint8_t* packed) {
  switch (bits) {
    case 2: return hsum8(dot_codes_vec<2>(n, q, packed));
    case 4: return hsum8(dot_codes_vec<4>(n, q, packed));
    default: return hsum8(dot_codes_vec<8>(n, q, packed));
  }
}

}  // namespace oscar
