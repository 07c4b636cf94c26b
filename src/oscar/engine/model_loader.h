// Loading a model for inference: weights (GGUF or safetensors), tokenizer, chat template,
// rotations and the KV format, configured once. Every front end (the CLI's commands, the
// server) loads through here.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "oscar/kv/kv_spec.h"
#include "oscar/rotation/rotation_set.h"
#include "oscar/model/transformer.h"
#include "oscar/text/chat_template.h"
#include "oscar/text/tokenizer.h"

namespace oscar::engine {

// What to load and how to keep its KV cache (the CLI's -m, -t, -c, --kv ... flags).
struct ModelOptions {
  std::string model;       // model file (.gguf) or safetensors directory
  int threads = 0;         // 0: all cores
  int ctx = 4096;          // KV capacity in tokens per sequence (capped by the model's trained context)
  std::string kv = "bf16"; // KV format name (KvSpec::parse)
  std::optional<std::string> kv_layers;  // "0-1:int4,27:int8": per-layer types over kv; "none": uniform
  std::string rotations;   // RotationZoo directory or GGUF with embedded rotations
  std::optional<int> kv_group, kv_sink, kv_recent;
  std::optional<float> k_clip, v_clip;
  bool k_bias_split = false, no_k_bias_split = false;  // override the type's default (on for int2-oscar*)
  bool no_k_mean = false;                              // int2-oscar*: keep the keys uncentred
  bool k_scale = false;                                // int2-oscar*: the rotations' per-channel key scale
  std::string kv_k_type, kv_v_type;                    // --kv-k-type / --kv-v-type: int4 | int8, empty: --kv's
  bool verbose = false;
  std::string device = "cpu";  // cpu | cuda
  // Weight storage on the CPU: "native" keeps the file's quantized / F16 / BF16 matrices
  // (integer kernels), "f32" dequantizes them at load (the exact reference path). The GPU
  // backend streams the native views to the device, which converts them to BF16 and folds R_V in.
  std::string weights = "native";
};

struct LoadedModel {
  std::unique_ptr<Transformer> transformer;
  std::unique_ptr<Tokenizer> tokenizer;
  ChatTemplateKind chat_template = ChatTemplateKind::none;
  std::string default_system;  // system message the model's template adds when none is given
  double load_seconds = 0.0;
};

// Reads rotations written by `oscar calibrate` (a RotationZoo directory) or embedded in a GGUF.
RotationSet load_rotations(const std::string& path);

// Applies threads, opens the model, builds the tokenizer, configures the KV format. Throws oscar::Error.
LoadedModel load_model(const ModelOptions& o);
// The KV flags as a spec; with kv_layers, n_layers > 0 also range-checks the items.
KvSpec kv_spec_from(const ModelOptions& o, int n_layers = 0);
// k_clip / v_clip over every layer: of per-layer KV types, or of a rotation set.
void apply_clip_flags(const ModelOptions& o, std::vector<KvLayerType>& types);
void apply_clip_flags(const ModelOptions& o, RotationSet& rs);
// Without kv_layers, an int2-oscar* spec takes the per-layer types the rotations were
// calibrated with (`oscar calibrate --kv-budget`). Returns whether it did.
bool apply_calibrated_layer_types(KvSpec& kv, const ModelOptions& o, const RotationSet* rs, int n_layers);

// The context one sequence may use: ctx, capped by the model's trained context.
int64_t context_limit(const ModelOptions& o, const ModelConfig& c);

}  // namespace oscar::engine
