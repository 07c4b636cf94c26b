// Stored weights → BF16 / f32 on the device, and R_V absorption (weight_convert.h).
// One thread per output element: these kernels run once per tensor at load, where the
// file's bytes, not the arithmetic, set the pace.
#include "oscar/cuda/weight_convert.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "oscar/cuda/host_checks.h"

namespace oscar::cuda {
namespace {

using detail::check_launch;
using detail::fail;

__device__ __forceinline__ float half_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(uint16_t(p[0] | (p[1] << 8))));
}
__device__ __forceinline__ uint32_t u32_at(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// The packed 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block (block_fields.h).
__device__ __forceinline__ void k4_scale_min(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Element j of one stored block at b, as formats/dequantize.cpp computes it: explicit
// round-to-nearest products and sums (__fmul_rn, __fadd_rn) so that nvcc fuses nothing.
template <StoredType T>
__device__ __forceinline__ float element(const uint8_t* b, int j) {
  if constexpr (T == StoredType::f32) {
    return __uint_as_float(u32_at(b));
  } else if constexpr (T == StoredType::f16) {
    return half_at(b);
  } else if constexpr (T == StoredType::bf16) {
    return __uint_as_float(uint32_t(b[0] | (b[1] << 8)) << 16);
  } else if constexpr (T == StoredType::q4_0) {
    const int q = j < 16 ? (b[2 + j] & 0x0f) : (b[2 + j - 16] >> 4);
    return __fmul_rn(float(q - 8), half_at(b));
  } else if constexpr (T == StoredType::q4_1) {
    const int q = j < 16 ? (b[4 + j] & 0x0f) : (b[4 + j - 16] >> 4);
    return __fadd_rn(__fmul_rn(float(q), half_at(b)), half_at(b + 2));
  } else if constexpr (T == StoredType::q5_0) {
    const int h = int((u32_at(b + 2) >> j) & 1u) << 4;  // bit j is element j's fifth bit
    const int q = (j < 16 ? (b[6 + j] & 0x0f) : (b[6 + j - 16] >> 4)) | h;
    return __fmul_rn(float(q - 16), half_at(b));
  } else if constexpr (T == StoredType::q5_1) {
    const int h = int((u32_at(b + 4) >> j) & 1u) << 4;
    const int q = (j < 16 ? (b[8 + j] & 0x0f) : (b[8 + j - 16] >> 4)) | h;
    return __fadd_rn(__fmul_rn(float(q), half_at(b)), half_at(b + 2));
  } else if constexpr (T == StoredType::q8_0) {
    return __fmul_rn(float(int8_t(b[2 + j])), half_at(b));
  } else if constexpr (T == StoredType::q4_k || T == StoredType::q5_k) {
    // Chunk c of 64 elements: sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles).
    const int c = j / 64, l = j % 64, is = 2 * c + (l >= 32), ll = l % 32;
    int sc, m;
    k4_scale_min(is, b + 4, &sc, &m);
    const float d = __fmul_rn(half_at(b), float(sc)), mn = __fmul_rn(half_at(b + 2), float(m));
    int q;
    if constexpr (T == StoredType::q4_k) {
      const uint8_t byte = b[16 + 32 * c + ll];
      q = l < 32 ? (byte & 0x0f) : (byte >> 4);
    } else {
      const uint8_t byte = b[48 + 32 * c + ll];
      q = (l < 32 ? (byte & 0x0f) : (byte >> 4)) + ((b[16 + ll] >> is) & 1) * 16;
    }
    return __fsub_rn(__fmul_rn(d, float(q)), mn);
  } else {  // q6_k: ql[128], qh[64], scales[16] int8, d:f16; halves of 128, quarters of 32
    const int half = j / 128, r = j % 128, quarter = r / 32, l = r % 32;
    const uint8_t* ql = b + 64 * half;
    const uint8_t qh = b[128 + 32 * half + l];
    const int8_t sc = int8_t(b[192 + 8 * half + l / 16 + 2 * quarter]);
    const int lo = (quarter & 1) ? ql[l + 32] : ql[l];
    const int q = ((quarter < 2 ? lo & 0x0f : lo >> 4) | (((qh >> (2 * quarter)) & 3) << 4)) - 32;
    return __fmul_rn(__fmul_rn(half_at(b + 208), float(sc)), float(q));
  }
}

template <StoredType T, int kElems, int kBytes, class Out>
__global__ void convert_kernel(const uint8_t* src, Out* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = element<T>(src + (i / kElems) * kBytes, int(i % kElems));
    if constexpr (sizeof(Out) == 2)
      dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    else
      dst[i] = v;
  }
}

template <class Out>
void convert(StoredType t, const void* src, Out* dst, int64_t n, cudaStream_t stream) {
  const StoredBlock blk = stored_block(t);
  if (n < 0 || n % blk.elements != 0)
    fail("stored_to_bf16", std::to_string(n) + " elements are not whole blocks of " + stored_type_name(t));
  if (n == 0) return;
  const auto* s = static_cast<const uint8_t*>(src);
  const int threads = 256;
  const int64_t blocks64 = (n + threads - 1) / threads;
  const unsigned blocks = unsigned(blocks64 < 65536 ? blocks64 : 65536);
  switch (t) {
#define OSCAR_CONVERT(T, E, B) \
  case StoredType::T: convert_kernel<StoredType::T, E, B><<<blocks, threads, 0, stream>>>(s, dst, n); break;
    OSCAR_CONVERT(f32, 1, 4)
    OSCAR_CONVERT(f16, 1, 2)
    OSCAR_CONVERT(bf16, 1, 2)
    OSCAR_CONVERT(q4_0, 32, 18)
    OSCAR_CONVERT(q4_1, 32, 20)
    OSCAR_CONVERT(q5_0, 32, 22)
    OSCAR_CONVERT(q5_1, 32, 24)
    OSCAR_CONVERT(q8_0, 32, 34)
    OSCAR_CONVERT(q4_k, 256, 144)
    OSCAR_CONVERT(q5_k, 256, 176)
    OSCAR_CONVERT(q6_k, 256, 210)
#undef OSCAR_CONVERT
  }
  check_launch(std::string("converting ") + stored_type_name(t) + " weights");
}

// out[h·d + i][c] = Σ_j r[j][i] · w[h·d + j][c]; grid.y = heads·d output rows.
__global__ void absorb_rows_kernel(const float* w, const float* r, uint16_t* out, int d, int64_t cols) {
  const int row = blockIdx.y, h = row / d, i = row % d;
  const float* block = w + int64_t(h) * d * cols;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    double acc = 0.0;
    for (int j = 0; j < d; ++j) acc += double(r[j * d + i]) * double(block[int64_t(j) * cols + c]);
    out[int64_t(row) * cols + c] = __bfloat16_as_ushort(__float2bfloat16_rn(float(acc)));
  }
}

// out[s·d + i] = Σ_j w[s·d + j] · r[j][i] for each d-wide segment s of every row.
__global__ void absorb_columns_kernel(const float* w, const float* r, uint16_t* out, int d, int64_t segments) {
  const int64_t total = segments * d;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = o / d;
    const int i = int(o % d);
    const float* seg = w + s * d;
    double acc = 0.0;
    for (int j = 0; j < d; ++j) acc += double(seg[j]) * double(r[j * d + i]);
    out[o] = __bfloat16_as_ushort(__float2bfloat16_rn(float(acc)));
  }
}

}  // namespace

StoredBlock stored_block(StoredType t) {
  switch (t) {
    case StoredType::f32: return {1, 4};
    case StoredType::f16: return {1, 2};
    case StoredType::bf16: return {1, 2};
    case StoredType::q4_0: return {32, 18};
    case StoredType::q4_1: return {32, 20};
    case StoredType::q5_0: return {32, 22};
    case StoredType::q5_1: return {32, 24};
    case StoredType::q8_0: return {32, 34};
    case StoredType::q4_k: return {256, 144};
    case StoredType::q5_k: return {256, 176};
    case StoredType::q6_k: return {256, 210};
  }
  fail("stored_block", "unknown stored type " + std::to_string(int(t)));
}

const char* stored_type_name(StoredType t) {
  switch (t) {
    case StoredType::f32: return "F32";
    case StoredType::f16: return "F16";
    case StoredType::bf16: return "BF16";
    case StoredType::q4_0: return "Q4_0";
    case StoredType::q4_1: return "Q4_1";
    case StoredType::q5_0: return "Q5_0";
    case StoredType::q5_1: return "Q5_1";
    case StoredType::q8_0: return "Q8_0";
    case StoredType::q4_k: return "Q4_K";
    case StoredType::q5_k: return "Q5_K";
    case StoredType::q6_k: return "Q6_K";
  }
  return "unknown";
}

void stored_to_bf16(StoredType t, const void* src, uint16_t* dst, int64_t n, cudaStream_t stream) {
  convert(t, src, dst, n, stream);
}

void stored_to_f32(StoredType t, const void* src, float* dst, int64_t n, cudaStream_t stream) {
  convert(t, src, dst, n, stream);
}

void absorb_value_rows(const float* w, const float* r, uint16_t* out, int heads, int d, int64_t cols,
                       cudaStream_t stream) {
  if (heads <= 0 || d <= 0 || cols <= 0 || heads * d > 65535)
    fail("absorb_value_rows", "bad shape: " + std::to_string(heads) + " heads of " + std::to_string(d) + " rows, " +
                                  std::to_string(cols) + " columns");
  const int threads = 256;
  const unsigned gx = unsigned((cols + threads - 1) / threads);
  absorb_rows_kernel<<<dim3(gx, unsigned(heads * d)), threads, 0, stream>>>(w, r, out, d, cols);
  check_launch("absorb_value_rows");
}

void absorb_output_columns(const float* w, const float* r, uint16_t* out, int64_t rows, int heads, int d,
                           cudaStream_t stream) {
  if (heads <= 0 || d <= 0 || rows <= 0)
    fail("absorb_output_columns", "bad shape: " + std::to_string(rows) + " rows of " + std::to_string(heads) +
                                      " heads × " + std::to_string(d));
  const int64_t segments = rows * heads;
  const int threads = 256;
  const int64_t want = (segments * d + threads - 1) / threads;
  absorb_columns_kernel<<<unsigned(want < 65536 ? want : 65536), threads, 0, stream>>>(w, r, out, d, segments);
  check_launch("absorb_output_columns");
}

}  // namespace oscar::cuda
