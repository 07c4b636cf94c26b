// Asymmetric uniform quantization of one KV row (one token, one KV head, d = head_dim
// floats, already rotated) at 2, 4 or 8 bits per group of G dims, with optional per-row
// quantile clipping. The byte layout is specified in docs/kv-layout.md; every kernel here
// (reference, AVX2) and elsewhere (attention, CUDA) must follow it.
//
// Row layout (little-endian), quant_row_bytes(p) bytes:
//   [codes: d·bits/8 bytes, group g at byte g·G·bits/8][params: d/G × {fp16 scale, fp16 zero}]
// Inside a group of G dims with k = 8/bits codes per byte and P = G/k bytes, byte j holds
// the codes of dims j, j+P, …, j+(k−1)P in bits [0,b), [b,2b), … ("parts" layout; at
// G = d and bits = 2 this is exactly the reference's quarter packing).
//
// Kernels take raw pointers and a QuantParams; they do not validate it (call
// quant_params_check once when the format is chosen).
#pragma once
#include <cstddef>
#include <cstdint>

#include "oscar/core/dtype.h"

namespace oscar {

inline constexpr int kQuantMaxHeadDim = 1024;

struct QuantParams {
  int bits = 2;            // 2, 4 or 8
  int head_dim = 128;      // d: a power of two in [32, 1024]
  int group = 128;         // G: 32, 64, 128 or 256; G <= d and G divides d
  float clip_ratio = 0.f;  // [0, 1]; 0 (and 1) = no clipping, see clip_threshold()
};

// Throws oscar::Error naming the first invalid field.
void quant_params_check(const QuantParams& p);

inline int quant_levels(int bits) { return (1 << bits) - 1; }  // L = 2^bits − 1, the top code
inline size_t quant_code_bytes(const QuantParams& p) { return size_t(p.head_dim) * size_t(p.bits) / 8; }
inline size_t quant_param_bytes(const QuantParams& p) { return size_t(p.head_dim / p.group) * 4; }
inline size_t quant_row_bytes(const QuantParams& p) { return quant_code_bytes(p) + quant_param_bytes(p); }
// Storage bits per element of a row: bits + 32/G (fp16 scale + fp16 zero per group).
double bits_per_element(const QuantParams& p);

// Clip threshold τ of a row: with i = min(⌊ratio·d⌋, d−1) (computed in double),
// τ = sort(|x|)[i] ascending. ratio <= 0 and ratio >= 1 return +inf (no clipping;
// ratio 1 would give τ = max|x|, an identity clamp anyway).
float clip_threshold(const float* x, int d, float ratio);

// fp16 (scale, zero) of one group whose grid must span [lo, hi] with L = 2^bits − 1 steps:
//   range = max(hi − lo, max(|lo|, |hi|)/256), scale = clamp(range/L, 2^-24, 65504),
//   s = fp16(scale) rounded up (so the grid covers [lo, hi]),
//   zero = fp16(clamp(−lo/f32(s), ±65504)) rounded to nearest.
// The floors replace the spec's max(·, 1e-8), which fp16 would round to 0 (a constant row
// would then dequantize to 0·inf = NaN); they keep |zero| <= 256·L < 65504 and cost no
// accuracy a BF16 copy of the values would have (range/256 is below a bf16 ulp).
struct QuantGroupParams {
  fp16 scale;
  fp16 zero;
};
QuantGroupParams uniform_group_params(float lo, float hi, int bits);
// The codes for these params: code = clamp(⌊x/s + z + 0.5⌋, 0, L) with the fp16-rounded s
// and z (so dequantization (code − z)·s is the nearest grid point); NaN gives code 0.
inline uint8_t uniform_code(float x, float s, float z, int levels) {
  const float t = x / s + z + 0.5f;
  if (!(t >= 1.0f)) return 0;  // also NaN
  if (t >= float(levels)) return uint8_t(levels);
  return uint8_t(int(t));  // t >= 1: truncation is floor
}

// Packing of one packing group of n dims (n·bits/8 bytes; see the layout above).
// n must be a multiple of 8/bits; codes: [n] values < 2^bits.
void pack_codes(int bits, int n, const uint8_t* codes, uint8_t* packed);
void unpack_codes(int bits, int n, const uint8_t* packed, uint8_t* codes);

// ---- the uniform codec -------------------------------------------------------------------
// x: [d] f32 (not modified); out / in / row: [quant_row_bytes(p)].
void quantize_row_ref(const QuantParams& p, const float* x, uint8_t* out);
void quantize_row(const QuantParams& p, const float* x, uint8_t* out);  // = ref (demotion is rare)

void dequantize_row_ref(const QuantParams& p, const uint8_t* in, float* x);
void dequantize_row_avx2(const QuantParams& p, const uint8_t* in, float* x);  // bit-exact with ref
void dequantize_row(const QuantParams& p, const uint8_t* in, float* x);

// q · x̂ without materializing x̂. The reference accumulates q_i·x̂_i in double; the fast
// path uses q·x̂ = Σ_g s_g·(q_g·code_g) − s_g·z_g·Σq_g.
float dot_row_ref(const QuantParams& p, const float* q, const uint8_t* row);
float dot_row_avx2(const QuantParams& p, const float* q, const uint8_t* row);
float dot_row(const QuantParams& p, const float* q, const uint8_t* row);

// acc[d] += a · x̂.
void axpy_row_ref(const QuantParams& p, float a, const uint8_t* row, float* acc);
void axpy_row_avx2(const QuantParams& p, float a, const uint8_t* row, float* acc);
void axpy_row(const QuantParams& p, float a, const uint8_t* row, float* acc);

// Many rows at once (what attention over the INT2 history calls): rows r of n_rows start
// at rows + r·row_stride bytes. dot: out[r] = q · x̂_r (Σq per group computed once).
// axpy: acc[d] += Σ_r a[r] · x̂_r.
void dot_rows_ref(const QuantParams& p, const float* q, const uint8_t* rows, size_t row_stride, int64_t n_rows,
                  float* out);
void dot_rows_avx2(const QuantParams& p, const float* q, const uint8_t* rows, size_t row_stride, int64_t n_rows,
                   float* out);
void dot_rows(const QuantParams& p, const float* q, const uint8_t* rows, size_t row_stride, int64_t n_rows,
              float* out);
void axpy_rows_ref(const QuantParams& p, const float* a, const uint8_t* rows, size_t row_stride, int64_t n_rows,
                   float* acc);
void axpy_rows_avx2(const QuantParams& p, const float* a, const uint8_t* rows, size_t row_stride, int64_t n_rows,
                    float* acc);
void axpy_rows(const QuantParams& p, const float* a, const uint8_t* rows, size_t row_stride, int64_t n_rows,
               float* acc);

// Σ_i q_i·code_i over one packing group of n dims (no scale/zero): the building block the
// KIVI key codec reuses. n·bits/8 must be a multiple of 8 (n >= 32 at any width).
float dot_codes_ref(int bits, int n, const float* q, const uint8_t* packed);
float dot_codes_avx2(int bits, int n, const float* q, const uint8_t* packed);
float dot_codes(int bits, int n, const float* q, const uint8_t* packed);

}  // namespace oscar
