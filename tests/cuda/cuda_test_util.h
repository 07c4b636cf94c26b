// Host-side helpers shared by the CUDA tests: pass/fail reporting, device buffers, and an
// independent implementation of the 16-bit formats and of the docs/kv-layout.md §1–§3 row
// (written from the definitions, not from src/oscar: the tests build without the project).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "oscar/cuda/check_cuda.h"

namespace oscar_cuda_test {

inline int g_failed = 0;
inline int g_passed = 0;

inline void report(bool ok, const std::string& line) {
  std::printf("%s %s\n", ok ? "[PASS]" : "[FAIL]", line.c_str());
  std::fflush(stdout);
  (ok ? g_passed : g_failed)++;
}

// ---- 16-bit formats (written from the IEEE definitions, not from src/oscar/core) -------

inline float bf16_to_f32(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {  // round to nearest even (inputs are finite)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float fp16_to_f32(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (e == 0) return sign * std::ldexp(float(m), -24);
  if (e == 31) return m ? NAN : sign * INFINITY;
  return sign * std::ldexp(float(1024 + m), e - 25);
}

inline uint16_t f32_to_fp16(float f) {  // round to nearest even, overflow to inf
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  if (x >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf
  float a;
  std::memcpy(&a, &x, 4);
  if (a < 0x1p-14f) return uint16_t(sign | uint16_t(std::nearbyint(double(a) * 0x1p24)));  // subnormal (or 0x400)
  uint32_t h = ((((x >> 23) & 0xffu) - 112u) << 10) | ((x >> 13) & 0x3ffu);
  const uint32_t rest = x & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
  return uint16_t(sign | h);
}

// ---- the §1 row: codes of each group in the parts layout, then (fp16 scale, zero) per group

struct RowFormat {
  int d, bits, group;
  int levels() const { return (1 << bits) - 1; }
  int code_bytes() const { return d * bits / 8; }
  int row_bytes() const { return code_bytes() + 4 * (d / group); }
};

// §3 after the §2 clip: per group min/max, range floored at max(|lo|,|hi|)/256, scale
// rounded UP to fp16, zero = −lo/scale rounded to nearest, codes from the rounded pair.
// §2: clamp to ±τ, τ = sort(|x|)[min(⌊ratio·d⌋, d − 1)] over the whole row (ratio 0 or 1: none).
inline std::vector<float> clip_row(const float* x, int d, float ratio) {
  std::vector<float> out(x, x + d);
  if (!(ratio > 0.0f) || ratio >= 1.0f) return out;
  const int idx = std::min(int(std::floor(double(ratio) * d)), d - 1);
  std::vector<float> a(static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) a[size_t(i)] = std::fabs(x[i]);
  std::sort(a.begin(), a.end());
  const float tau = a[size_t(idx)];
  for (float& v : out) v = std::clamp(v, -tau, tau);
  return out;
}

inline void quantize_row(const RowFormat& f, const float* x_in, uint8_t* row, float clip_ratio = 0.0f) {
  const int k = 8 / f.bits, part = f.group / k, L = f.levels();
  const std::vector<float> clipped = clip_row(x_in, f.d, clip_ratio);
  const float* x = clipped.data();
  std::memset(row, 0, size_t(f.row_bytes()));
  for (int g = 0; g < f.d / f.group; ++g) {
    const float* xg = x + g * f.group;
    const float lo = *std::min_element(xg, xg + f.group), hi = *std::max_element(xg, xg + f.group);
    const float mag = std::max(std::fabs(lo), std::fabs(hi));
    const float range = std::max(hi - lo, mag * (1.0f / 256.0f));
    const float scale = std::min(std::max(range / float(L), 0x1p-24f), 65504.0f);
    uint16_t s16 = f32_to_fp16(scale);
    if (fp16_to_f32(s16) < scale) ++s16;
    const float s = fp16_to_f32(s16);
    const uint16_t z16 = f32_to_fp16(std::min(std::max(0.0f - lo / s, -65504.0f), 65504.0f));
    const float z = fp16_to_f32(z16);
    uint8_t* codes = row + g * (f.group * f.bits / 8);
    for (int i = 0; i < f.group; ++i) {
      const float t = xg[i] / s + z + 0.5f;
      const int c = t >= 1.0f ? std::min(int(t), L) : 0;
      codes[i % part] = uint8_t(codes[i % part] | (c << ((i / part) * f.bits)));
    }
    uint8_t* pair = row + f.code_bytes() + 4 * g;
    pair[0] = uint8_t(s16 & 0xff);
    pair[1] = uint8_t(s16 >> 8);
    pair[2] = uint8_t(z16 & 0xff);
    pair[3] = uint8_t(z16 >> 8);
  }
}

// x̂ = (code − z)·s in f32, as the CPU codec reconstructs it.
inline void dequantize_row(const RowFormat& f, const uint8_t* row, float* x) {
  const int k = 8 / f.bits, part = f.group / k, mask = f.levels();
  for (int g = 0; g < f.d / f.group; ++g) {
    const uint8_t* pair = row + f.code_bytes() + 4 * g;
    const float s = fp16_to_f32(uint16_t(pair[0] | (pair[1] << 8)));
    const float z = fp16_to_f32(uint16_t(pair[2] | (pair[3] << 8)));
    const uint8_t* codes = row + g * (f.group * f.bits / 8);
    for (int i = 0; i < f.group; ++i) {
      const int c = (codes[i % part] >> ((i / part) * f.bits)) & mask;
      x[g * f.group + i] = (float(c) - z) * s;
    }
  }
}

struct DeviceBuffer {
  void* ptr = nullptr;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { CHECK_CUDA(cudaMalloc(&ptr, std::max<size_t>(bytes, 16))); }
  template <class T>
  static DeviceBuffer from(const std::vector<T>& v) {
    DeviceBuffer d(v.size() * sizeof(T));
    if (!v.empty()) CHECK_CUDA(cudaMemcpy(d.ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr) { o.ptr = nullptr; }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

template <class T>
std::vector<T> download(const DeviceBuffer& d, size_t n) {
  std::vector<T> v(n);
  if (n) CHECK_CUDA(cudaMemcpy(v.data(), d.ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// The message of the std::runtime_error `call` throws ("" when it throws none): the
// parameter checks must refuse bad input before launching anything.
template <class Call>
std::string error_of(Call&& call) {
  try {
    call();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// The suites (main.cu runs them when a GPU is present).
void run_decode_attention_tests(uint32_t seed, int n_sm);
void run_prefill_attention_tests(uint32_t seed);
void run_cache_write_tests(uint32_t seed);
void run_elementwise_tests(uint32_t seed);
void run_device_model_tests(uint32_t seed);
void run_attention_prologue_tests(uint32_t seed);
void run_key_bias_tests(uint32_t seed);
void run_sampling_tests(uint32_t seed);
void run_gemv_tests(uint32_t seed);
void run_cpu_fixture_tests();  // GPU vs CPU logits: fixtures from $OSCAR_CUDA_FIXTURE_DIR

}  // namespace oscar_cuda_test
