// The engine's Runner for --device cpu or cuda (a DeviceRunner over oscar::cuda::DeviceModel, with
// the model and KV format load_model configured on the CPU side): what run, ppl, niah and bench
// drive. The one place the commands meet the CUDA build switch.
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
// sequences of up to `capacity` tokens.
std::unique_ptr<engine::Runner> make_runner(LoadedModel& m, const std::string& device, int max_seqs, int64_t capacity);

}  // namespace oscar::cli
