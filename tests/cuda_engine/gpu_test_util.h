// What the GPU suites of test_cuda_engine share: whether a GPU is here (they skip without
// one), and the tiny Qwen2-style model they run (2 layers, head_dim 64: a shape the device
// takes) configured with a test's short windows (sink 16, recent 32).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "../tiny_model.h"
#include "oscar/model/transformer.h"

namespace oscar::test {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// The key-bias split stays off (on by default for int2-oscar: the cases that split say so).
inline Transformer tiny_device_model(const std::string& kv, uint64_t seed) {
  Transformer t(tiny_model(true, seed, /*n_layers=*/2, /*head_dim=*/64));
  KvSpec s = tiny_kv_spec(kv, 16, 32);
  s.k_bias_split = false;
  t.configure_kv(s);
  return t;
}

}  // namespace oscar::test
