// --device cuda: the generation loop of `run` on the CUDA backend (oscar::cuda::DeviceModel),
// with the model and KV format that load_model configured on the CPU side.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "common.h"
#include "oscar/eval/niah.h"
#include "oscar/eval/perplexity.h"

namespace oscar::cli {

// Throws oscar::Error when the build has no CUDA backend or no GPU is present.
void check_device(const std::string& device);

// Like generate(): feeds the prompt token by token (prefill by decode steps), then samples;
// the KV cache holds `capacity` tokens. Prints the KV memory line at the end.
GenerationStats generate_on_device(LoadedModel& m, int64_t capacity, const std::vector<int32_t>& prompt,
                                   int n_predict, Sampler& sampler, const std::function<bool(int32_t)>& on_token);

// For `ppl --device cuda`: a DeviceModel for one sequence of n_ctx tokens and the chunk
// function perplexity() calls (each chunk prefilled from an empty cache on the GPU).
ChunkLogitsFn device_chunk_logits(LoadedModel& m, int n_ctx);

// For `niah --device cuda`: what niah_generate does (prefill, then greedy tokens up to
// max_new or an end-of-generation token), on a DeviceModel for one prompt of up to
// `capacity` tokens at a time.
using PromptGenerateFn = std::function<NiahGeneration(std::span<const int32_t> prompt, int max_new)>;
PromptGenerateFn device_prompt_generate(LoadedModel& m, int64_t capacity);

// For `bench --device cuda`: prefill `prompt` into an empty sequence, then decode `gen`
// one step each (graphs); tokens per second of each, host clock around synchronized work.
struct DeviceBenchResult {
  double prefill_tokens_per_s = 0.0, decode_tokens_per_s = 0.0;
};
using DeviceBenchFn = std::function<DeviceBenchResult(const std::vector<int32_t>& prompt, const std::vector<int32_t>& gen)>;
DeviceBenchFn device_bench(LoadedModel& m, int64_t capacity);

}  // namespace oscar::cli
