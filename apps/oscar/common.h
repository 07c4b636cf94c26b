// What every subcommand shares: model flags, loading a model with its tokenizer,
// the generation loop, and UTF-8-safe streaming of token pieces.
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oscar/backends/open_runner.h"
#include "oscar/core/clock.h"
#include "oscar/core/format_bytes.h"
#include "oscar/core/read_file.h"
#include "oscar/engine/cpu_runner.h"
#include "oscar/engine/generate.h"
#include "oscar/engine/model_loader.h"
#include "oscar/kv/kv_cache.h"
#include "oscar/model/transformer.h"
#include "oscar/sampling/sampler.h"
#include "oscar/text/chat_template.h"
#include "oscar/text/tokenizer.h"
#include "oscar/text/utf8_stream.h"

namespace oscar::cli {

using engine::ModelOptions;
using engine::LoadedModel;
using engine::load_rotations;
using engine::load_model;
using engine::kv_spec_from;
using engine::apply_clip_flags;
using engine::apply_calibrated_layer_types;
using engine::GenerationStats;
using engine::CpuRunner;

void add_model_options(CLI::App& cmd, ModelOptions& o, bool with_ctx = true);
void add_sampler_options(CLI::App& cmd, SamplerParams& p);

using oscar::Utf8Stream;

using oscar::read_text_file;  // core/read_file.h

// Writes j indented, with a final newline; throws oscar::Error "cannot write '<path>'".
void write_json_file(const std::string& path, const nlohmann::json& j);

// The KV memory line `run` and `chat` end with: bytes, bits per element, and against BF16.
void print_kv_memory(const engine::Runner& runner, SeqId seq, const std::string& kv_name);


// The Runner run, ppl, niah and bench drive (engine::open_runner): room for max_seqs
// sequences of up to `capacity` tokens on `device`; on a GPU its description goes to stderr.
// forward_rows: most token rows in one forward on the GPU (≤ 0: the backend's default).
std::unique_ptr<engine::Runner> make_runner(LoadedModel& m, const std::string& device, int max_seqs, int64_t capacity,
                                            int64_t forward_rows = 0);
using engine::check_device;

}  // namespace oscar::cli
