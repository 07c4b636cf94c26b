// The Hopper prefill attention kernel (wgmma): what prefill_attention launches for head_dim
// 128 without the key bias on an sm_90 device. Internal to src/oscar/cuda.
#pragma once
#include <cuda_runtime.h>

#include "oscar/cuda/prefill_attention.h"

namespace oscar::cuda::detail {

// Whether the Hopper kernel can take these (checked) parameters on the current device:
// d = 128, no key bias, q 16-byte and out 8-byte aligned, compute capability 9.0.
bool prefill_attention_sm90_applies(const PrefillAttentionParams& p);

// Launches it on `stream`; the history rows must already be in p.scratch (BF16).
void prefill_attention_sm90(const PrefillAttentionParams& p, cudaStream_t stream);

}  // namespace oscar::cuda::detail
