#include "oscar/engine/model_loader.h"

#include <cblas.h>
#include <malloc.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "oscar/attention/attention_decode_kernels.h"
#include "oscar/core/clock.h"
#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/formats/gguf.h"
#include "oscar/rotation/rotation_gguf.h"
#include "oscar/rotation/rotation_io.h"
#include "oscar/model/gguf_weight_source.h"
#include "oscar/model/weight_source.h"
#include "oscar/text/tokenizer_hf.h"

namespace oscar::engine {

namespace {

// What the engine's attention kernels take (decode_attention on the CPU, the device's likewise):
// refused at load, naming the file, rather than at the first decode step.
void check_engine_supports(const std::string& file, const ModelConfig& c) {
  if (c.head_dim % 8 != 0 || c.head_dim > kMaxDecodeHeadDim)
    fail("{}: model config: head_dim = {} is not supported (a multiple of 8 up to {})", file, c.head_dim,
         kMaxDecodeHeadDim);
  if (c.n_heads / c.n_kv_heads > kMaxDecodeGroup)
    fail("{}: model config: n_heads / n_kv_heads = {} is not supported (at most {} query heads per KV head)", file,
         c.n_heads / c.n_kv_heads, kMaxDecodeGroup);
}
std::string gib(int64_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / (1LL << 30)); }
}  // namespace

RotationSet load_rotations(const std::string& path) {
  RotationSet rs;
  if (path.ends_with(".gguf")) {
    auto embedded = read_embedded_rotations(gguf::GgufFile::open(path));
    if (!embedded) fail("'{}' holds no OSCAR rotations (make them with `oscar rotations embed`)", path);
    rs = std::move(*embedded);
  } else {
    rs = read_rotation_dir(path);
  }
  // The readers check the layers of kv_layers; its KV type names are the cache's to check.
  if (!rs.kv_layers.empty()) {
    try {
      parse_kv_layers(rs.kv_layers, int(rs.layers.size()));
    } catch (const Error& e) {
      fail("'{}': kv_layers '{}': {}", path, rs.kv_layers, e.what());
    }
  }
  return rs;
}

void apply_clip_flags(const ModelOptions& o, std::vector<KvLayerType>& types) {
  for (KvLayerType& t : types) {
    if (o.k_clip) t.k_clip = *o.k_clip;
    if (o.v_clip) t.v_clip = *o.v_clip;
  }
}

void apply_clip_flags(const ModelOptions& o, RotationSet& rs) {
  for (LayerRotation& l : rs.layers) {
    if (o.k_clip) l.k_clip = *o.k_clip;
    if (o.v_clip) l.v_clip = *o.v_clip;
  }
}

KvSpec kv_spec_from(const ModelOptions& o, int n_layers) {
  KvSpec s = KvSpec::parse(o.kv);
  if (o.kv_layers && *o.kv_layers != "none") s.layer_types = parse_kv_layers(*o.kv_layers, n_layers);
  if (o.kv_group) s.group = *o.kv_group;
  if (o.kv_sink) s.sink = *o.kv_sink;
  if (o.kv_recent) s.recent = *o.kv_recent;
  // --k-clip / --v-clip apply to every layer, as they would to a whole-model run of its type.
  if (o.k_clip) s.k_clip = *o.k_clip;
  if (o.v_clip) s.v_clip = *o.v_clip;
  if (o.k_bias_split) s.k_bias_split = true;
  if (o.no_k_bias_split) s.k_bias_split = false;
  if (o.no_k_mean) s.k_mean = false;
  if (o.k_scale) s.k_scale = true;
  for (const auto& [name, flag, out] : {std::tuple{&o.kv_k_type, "--kv-k-type", &s.k_quant},
                                        std::tuple{&o.kv_v_type, "--kv-v-type", &s.v_quant}}) {
    if (*name == "int4") *out = KvQuant::int4;
    else if (*name == "int8") *out = KvQuant::int8;
    else if (!name->empty()) fail("{} must be int4 or int8, not '{}'", flag, *name);
  }
  apply_clip_flags(o, s.layer_types);
  s.validate();
  return s;
}

bool apply_calibrated_layer_types(KvSpec& kv, const ModelOptions& o, const RotationSet* rs, int n_layers) {
  if (o.kv_layers || !rs || rs->kv_layers.empty() || kv.rotation != KvRotation::calibrated) return false;
  kv.layer_types = parse_kv_layers(rs->kv_layers, n_layers);
  apply_clip_flags(o, kv.layer_types);
  kv.validate();
  return true;
}

LoadedModel load_model(const ModelOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  set_num_threads(o.threads);
  openblas_set_num_threads(num_threads());
  LoadedModel m;
  KvSpec kv = kv_spec_from(o);  // flags first: fail before the slow part
  std::string tmpl;
  std::optional<RotationSet> rotations;
  if (!o.rotations.empty()) rotations = load_rotations(o.rotations);
  std::unique_ptr<WeightSource> src;
  int n_layers = 0;
  bool wants_rotations = false;
  const auto check_layers = [&](int n) {
    n_layers = n;
    kv.validate_layers(n_layers);
    wants_rotations = kv.uses_rotation(KvRotation::calibrated, n_layers);
  };
  const WeightStorage storage = o.weights == "f32" ? WeightStorage::f32 : WeightStorage::native;
  // Refusals of the model's own contents name its file (the tokenizer's and the weights'
  // checks name only the field); a flag's refusal stays as it is.
  const auto named = [&o](auto&& step) -> decltype(auto) {
    try {
      return step();
    } catch (const Error& e) {
      if (std::string_view(e.what()).find(o.model) != std::string_view::npos) throw;
      fail("{}: {}", o.model, e.what());
    }
  };
  if (std::filesystem::is_directory(o.model) || o.model.ends_with(".safetensors")) {
    src = named([&] { return open_weight_source(o.model); });
    check_engine_supports(o.model, src->config());
    check_layers(src->config().n_layers);
    const std::string dir =
        std::filesystem::is_directory(o.model) ? o.model : std::filesystem::path(o.model).parent_path().string();
    m.tokenizer = named([&] { return std::make_unique<Tokenizer>(tokenizer_data_from_hf(dir)); });
    tmpl = hf_chat_template(dir);
  } else {
    check_model_exists(o.model);
    // Parsed once: the tokenizer's arrays (152K strings on Qwen2.5) cost tens of MB a copy.
    gguf::GgufFile f = gguf::GgufFile::open(o.model);
    const ModelConfig config = gguf_model_config(f);
    check_engine_supports(o.model, config);
    check_layers(config.n_layers);
    m.tokenizer = named([&] { return std::make_unique<Tokenizer>(tokenizer_data_from_gguf(f)); });
    tmpl = f.get_string("tokenizer.chat_template", "");
    if (!rotations && wants_rotations) rotations = read_embedded_rotations(f);
    src = open_gguf_source(std::move(f));
  }
  m.chat_template = detect_chat_template(tmpl, arch_name(src->config().arch));
  m.default_system = default_system_message(tmpl);
  if (apply_calibrated_layer_types(kv, o, rotations ? &*rotations : nullptr, n_layers))
    fmt::print(stderr, "KV per-layer types from the rotations (calibrated for {:.2f} bits): {} (--kv-layers none: uniform)\n",
               rotations->kv_budget_bits, rotations->kv_layers);
  if (rotations && kv.rotation == KvRotation::calibrated && !kv.k_scale &&
      std::any_of(rotations->layers.begin(), rotations->layers.end(), [](const LayerRotation& l) { return !l.k_scale.empty(); }))
    fmt::print(stderr, "note: the rotations carry a per-channel key scale (their R_K was fitted for scaled queries); "
                       "add --k-scale to use it\n");
  // --device cuda streams the native views to the device (engine/cuda/device_weight_loader.h):
  // the host never holds the model as f32.
  m.transformer = std::make_unique<Transformer>(named([&] { return load_model_weights(*src, storage); }));
  if (rotations) apply_clip_flags(o, *rotations);
  m.transformer->configure_kv(kv, rotations ? &*rotations : nullptr);
  if (m.tokenizer->n_vocab() != m.transformer->config().n_vocab)
    fail("'{}': tokenizer has {} tokens but the embedding has {} rows", o.model, m.tokenizer->n_vocab(),
         m.transformer->config().n_vocab);
  // The parsed metadata (tens of MB of small strings) is freed here, below the tokenizer's
  // and the weights' allocations, where malloc would keep it resident: hand it back.
  src.reset();
  malloc_trim(0);
  m.load_seconds = seconds_since(t0);
  if (o.verbose) {
    const ModelConfig& c = m.transformer->config();
    fmt::print(stderr, "model: {} ({}), {} layers, n_embd {}, heads {}/{}, head_dim {}, vocab {}, weights {} ({}), loaded in {:.2f} s\n",
               c.name, arch_name(c.arch), c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads, c.head_dim, c.n_vocab,
               gib(m.transformer->weights().n_bytes()), storage == WeightStorage::f32 ? "f32" : "as stored",
               m.load_seconds);
  }
  return m;
}

int64_t context_limit(const ModelOptions& o, const ModelConfig& c) {
  return c.n_ctx_train > 0 ? std::min<int64_t>(o.ctx, c.n_ctx_train) : o.ctx;
}

}  // namespace oscar::engine
