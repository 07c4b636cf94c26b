// --device cuda: the engine's Runner on the CUDA backend, and what ppl and bench run there
// (oscar::cuda::DeviceModel) with the model and KV format load_model configured on the CPU side.
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

// The engine's Runner for `device` (cpu, or cuda: a DeviceRunner) with room for max_seqs
// sequences of up to `capacity` tokens: what run and niah generate on.
std::unique_ptr<engine::Runner> make_runner(LoadedModel& m, const std::string& device, int max_seqs, int64_t capacity);

// For `ppl --device cuda`: a DeviceModel for one sequence of n_ctx tokens and the chunk
// function perplexity() calls (each chunk prefilled from an empty cache on the GPU).
ChunkLogitsFn device_chunk_logits(LoadedModel& m, int n_ctx);

}  // namespace oscar::cli
