// The bridge from the CPU engine to the CUDA backend: a configured oscar::Transformer's
// weights (BF16, with R_V already absorbed when configure_kv absorbed it) as the plain
// structs of oscar/engine/cuda/device_model.h, and its KV format as it is (KvFormat); its
// dimensions are the CPU's own (ModelConfig is a ModelDims). Built only with CUDA.
#pragma once
#include "oscar/engine/cuda/device_model.h"
#include "oscar/model/transformer.h"

namespace oscar {

// Throws oscar::Error for a model the device cannot run (head_dim other than 64 or 128).
void check_device_model(const ModelConfig& c);
// Every weight matrix rounded to BF16 (nearest even); norms and biases stay f32.
cuda::HostModel device_host_model(const Transformer& t);
// t's KV format (Transformer::kv_format()), once checked for what the device cache lacks:
// an f32 cache, Lloyd-Max or KIVI history, K and V coded apart, --k-scale. Throws
// oscar::Error naming it.
const KvFormat& device_kv_format(const Transformer& t);

}  // namespace oscar
