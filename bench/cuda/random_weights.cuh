// Random BF16 weights made on the device, for benchmarks at real model shapes (and the
// test that runs such a model): matrices uniform in ±1/sqrt(n_in), norms 1, biases small,
// each tensor its own stream of the seed. A WeightLoader for DeviceModel's constructor:
//   oscar::cuda::DeviceModel model(shape, kv, limits, RandomWeightLoader(seed));
#pragma once
#include <cmath>
#include <cstdint>

#include <cuda_bf16.h>

#include "oscar/engine/cuda/device_model.h"
#include "oscar/cuda/host_checks.h"

namespace oscar::cuda {

namespace random_weights_detail {
__device__ inline uint32_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  return uint32_t(x >> 32);
}

// Element i: a uniform in [−1, 1) from the hash of (seed, i).
__device__ inline float uniform(uint64_t seed, int64_t i) {
  return float(mix(seed * 0x9E3779B97F4A7C15ull + uint64_t(i))) * 0x1p-31f - 1.0f;
}

__global__ inline void fill_uniform_bf16(uint16_t* w, int64_t n, float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    w[i] = __bfloat16_as_ushort(__float2bfloat16_rn(uniform(seed, i) * scale));
}

__global__ inline void fill_f32(float* w, int64_t n, float base, float spread, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    w[i] = base + spread * uniform(seed, i);
}
}  // namespace random_weights_detail

class RandomWeightLoader final : public WeightLoader {
 public:
  explicit RandomWeightLoader(uint64_t seed) : key_(seed * 1000) {}
  void load(const WeightTarget& t, cudaStream_t stream) const override {
    using namespace random_weights_detail;
    const int64_t n = t.rows * t.cols;
    if (t.bf16) {
      fill_uniform_bf16<<<2048, 256, 0, stream>>>(t.bf16, n, 1.0f / std::sqrt(float(t.cols)), ++key_);
    } else {
      const bool bias = t.kind == WeightKind::bq || t.kind == WeightKind::bk || t.kind == WeightKind::bv;
      fill_f32<<<256, 256, 0, stream>>>(t.f32, n, bias ? 0.0f : 1.0f, bias ? 0.01f : 0.0f, ++key_);
    }
    detail::check_launch("random weights: " + t.name);
  }

 private:
  mutable uint64_t key_;
};

}  // namespace oscar::cuda
