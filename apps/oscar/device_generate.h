// --device cuda: the generation loop of `run` on the CUDA backend (oscar::cuda::DeviceModel),
// with the model and KV format that load_model configured on the CPU side.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "common.h"

namespace oscar::cli {

// Throws oscar::Error when the build has no CUDA backend or no GPU is present.
void check_device(const std::string& device);

// Like generate(): feeds the prompt token by token (prefill by decode steps), then samples;
// the KV cache holds `capacity` tokens. Prints the KV memory line at the end.
GenerationStats generate_on_device(LoadedModel& m, int64_t capacity, const std::vector<int32_t>& prompt,
                                   int n_predict, Sampler& sampler, const std::function<bool(int32_t)>& on_token);

}  // namespace oscar::cli
