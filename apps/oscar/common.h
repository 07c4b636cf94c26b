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

#include "oscar/kv/kv_cache.h"
#include "oscar/model/transformer.h"
#include "oscar/sampling/sampler.h"
#include "oscar/text/chat_template.h"
#include "oscar/text/tokenizer.h"

namespace oscar::cli {

struct ModelOptions {
  std::string model;       // -m
  int threads = 0;         // -t; 0: all cores
  int ctx = 4096;          // -c; KV capacity in tokens (capped by the model's trained context)
  std::string kv = "bf16"; // --kv
  std::optional<std::string> kv_layers;  // --kv-layers "0-1:int4,27:int8": per-layer types over --kv
  std::string rotations;   // --rotations DIR (RotationZoo files from `oscar calibrate`)
  std::optional<int> kv_group, kv_sink, kv_recent;
  std::optional<float> k_clip, v_clip;
  bool k_bias_split = false, no_k_bias_split = false;  // override the type's default (on for int2-oscar*)
  bool no_k_mean = false;                              // int2-oscar*: keep the keys uncentred
  bool k_scale = false;                                // int2-oscar*: the rotations' per-channel key scale
  bool verbose = false;
  std::string device = "cpu";  // --device cpu|cuda (run, ppl, niah and bench take cuda)
};

void add_model_options(CLI::App& cmd, ModelOptions& o, bool with_ctx = true);
void add_sampler_options(CLI::App& cmd, SamplerParams& p);

struct LoadedModel {
  std::unique_ptr<Transformer> transformer;
  std::unique_ptr<Tokenizer> tokenizer;
  ChatTemplateKind chat_template = ChatTemplateKind::none;
  std::string default_system;  // system message the model's template adds when none is given
  double load_seconds = 0.0;
};

// Reads rotations written by `oscar calibrate` (a RotationZoo directory). Throws oscar::Error.
RotationSet load_rotations(const std::string& path);

// Applies -t, opens the model (GGUF or safetensors), builds the tokenizer. Throws oscar::Error.
LoadedModel load_model(const ModelOptions& o);
// --kv and its flags as a spec; with --kv-layers, n_layers > 0 also range-checks the items.
// --kv-layers none: uniform, even where the rotations carry per-layer types.
KvSpec kv_spec_from(const ModelOptions& o, int n_layers = 0);
// --k-clip / --v-clip over every layer: of per-layer KV types, or of a rotation set.
void apply_clip_flags(const ModelOptions& o, std::vector<KvLayerType>& types);
void apply_clip_flags(const ModelOptions& o, RotationSet& rs);
// Without --kv-layers, an int2-oscar* spec takes the per-layer types the rotations were
// calibrated with (`oscar calibrate --kv-budget`). Returns whether it did.
bool apply_calibrated_layer_types(KvSpec& kv, const ModelOptions& o, const RotationSet* rs, int n_layers);

// Feeds the prompt, then samples up to n_predict tokens, calling on_token for each new
// one (return false to stop). Stops at an end-of-generation token, which is not passed on.
struct GenerationStats {
  int64_t n_prompt = 0, n_generated = 0;
  double prompt_seconds = 0.0, generate_seconds = 0.0;
};
GenerationStats generate(LoadedModel& m, KvCache& cache, SeqId seq, const std::vector<int32_t>& prompt,
                         int n_predict, Sampler& sampler, const std::function<bool(int32_t)>& on_token);

// Collects token bytes and releases only whole UTF-8 characters.
class Utf8Stream {
 public:
  std::string push(const std::string& bytes);
  std::string flush();

 private:
  std::string pending_;
};

// The whole file as bytes; throws oscar::Error "cannot read <what>'<path>'".
std::string read_text_file(const std::string& path, std::string_view what = "");

// Writes j indented, with a final newline; throws oscar::Error "cannot write '<path>'".
void write_json_file(const std::string& path, const nlohmann::json& j);

std::string format_bytes(int64_t bytes);
void print_kv_memory(const KvCache& cache, SeqId seq);

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace oscar::cli
