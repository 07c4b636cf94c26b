// Sampling on the GPU, the CPU Sampler's chain (src/oscar/sampling/sampler.h) without the
// repetition penalty: top-k (k ≤ 64, ties keep the lower id), then top-p and min-p judged
// at temperature 1 over the k candidates (top-p keeps the shortest prefix, best first, whose
// mass reaches top_p of theirs; min-p drops logits below max + log(min_p)), then a draw at
// `temperature` over what is kept, best first, with the caller's uniform u ∈ [0, 1) per row
// (so the host's seeded RNG decides, and tests can replay it). temperature ≤ 0: argmax.
//
// Self-contained like decode_attention.h: depends on the CUDA runtime only.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace oscar::cuda {

inline constexpr int kSampleMaxTopK = 64;

struct SampleParams {
  float temperature = 0.8f;
  int top_k = 40;        // 1 … kSampleMaxTopK
  float top_p = 0.95f;   // (0, 1]; 1: off
  float min_p = 0.05f;   // [0, 1]; 0: off
};

// ids[r] from logits row r ([rows, n] f32, device); u: [rows] device doubles in [0, 1).
// Throws std::runtime_error naming the invalid parameter.
void sample_rows(const float* logits, int64_t rows, int64_t n, const SampleParams& p, const double* u, int32_t* ids,
                 cudaStream_t stream = nullptr);

}  // namespace oscar::cuda
