#include "common.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/formats/gguf.h"
#include "oscar/kv/rotation_gguf.h"
#include "oscar/model/weight_source.h"
#include "oscar/text/tokenizer_hf.h"

namespace oscar::cli {

void add_model_options(CLI::App& cmd, ModelOptions& o, bool with_ctx) {
  cmd.add_option("-m,--model", o.model, "model file (.gguf) or safetensors directory")->required();
  cmd.add_option("-t,--threads", o.threads, "threads (0: all cores)")->check(CLI::Range(0, 1024));
  if (with_ctx) cmd.add_option("-c,--ctx-size", o.ctx, "KV cache size in tokens")->check(CLI::Range(8, 1 << 24));
  cmd.add_option("--kv", o.kv,
                 "KV cache type: bf16 | f32 | int8 | int4 | int2 | int2-hadamard | kivi2 | int2-oscar | int2-oscar-lloydmax | "
                 "int2-oscar-lloydmax-exact");
  cmd.add_option("--kv-layers", o.kv_layers,
                 "per-layer KV types over --kv, e.g. \"0-1:int4,27:int8\" (ranges inclusive; types bf16 | int8 | int4 | "
                 "int2 | int2-hadamard | int2-oscar | int2-oscar-lloydmax | int2-oscar-lloydmax-exact); default for "
                 "int2-oscar*: the per-layer types chosen by `oscar calibrate --kv-budget`, if any; none: uniform");
  cmd.add_option("--rotations", o.rotations,
                 "OSCAR rotations: a directory from `oscar calibrate`, or a GGUF with embedded rotations "
                 "(default for int2-oscar: the model's own, if embedded)");
  cmd.add_option("--kv-group", o.kv_group, "quant group along head_dim (default 128, at most head_dim)");
  cmd.add_option("--kv-sink", o.kv_sink, "tokens kept BF16 at the start (default 64)");
  cmd.add_option("--kv-recent", o.kv_recent, "tokens kept BF16 at the end (default 256)");
  cmd.add_option("--k-clip", o.k_clip, "key clip ratio in [0, 1] (quantile of |x| per row; 0: off)");
  cmd.add_option("--v-clip", o.v_clip, "value clip ratio in [0, 1]");
  // Two plain flags: CLI11 fills an optional<bool> behind a negated flag even when neither
  // is given, which silently turned the int2-oscar default off.
  auto* split = cmd.add_flag("--k-bias-split", o.k_bias_split,
                             "store keys without their QKV-bias part RoPE(b_k, pos) and add it back exactly at "
                             "attention time (default: on for int2-oscar*, off for the baselines)");
  cmd.add_flag("--no-k-bias-split", o.no_k_bias_split, "keep the QKV bias inside the quantized keys")->excludes(split);
  cmd.add_flag("--no-k-mean", o.no_k_mean,
               "int2-oscar*: do not subtract the rotations' calibrated key mean before caching keys (on by default "
               "when the rotations carry one; softmax cancels the shift, so it costs nothing at run time)");
  cmd.add_flag("--k-scale", o.k_scale,
               "int2-oscar*: divide keys and multiply queries by the rotations' per-channel key scale before R_K "
               "(opt-in; needs rotations made by `oscar rotations tune --k-scale`)");
  cmd.add_flag("-v,--verbose", o.verbose, "print loading details");
}

void add_sampler_options(CLI::App& cmd, SamplerParams& p) {
  cmd.add_option("--temp", p.temperature, "temperature (0: greedy)");
  cmd.add_option("--top-k", p.top_k, "top-k (0: off)");
  cmd.add_option("--top-p", p.top_p, "top-p (1: off)");
  cmd.add_option("--min-p", p.min_p, "min-p (0: off)");
  cmd.add_option("--repeat-penalty", p.repeat_penalty, "repetition penalty (1: off)");
  cmd.add_option("--repeat-last-n", p.repeat_last_n, "tokens the repetition penalty looks back");
  cmd.add_option("-s,--seed", p.seed, "random seed");
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
  auto src = open_weight_source(o.model);
  const int n_layers = src->config().n_layers;
  kv.validate_layers(n_layers);
  const bool wants_rotations = kv.uses_rotation(KvRotation::calibrated, n_layers);
  std::string tmpl;
  std::optional<RotationSet> rotations;
  if (!o.rotations.empty()) rotations = load_rotations(o.rotations);
  if (std::filesystem::is_directory(o.model) || o.model.ends_with(".safetensors")) {
    const std::string dir =
        std::filesystem::is_directory(o.model) ? o.model : std::filesystem::path(o.model).parent_path().string();
    m.tokenizer = std::make_unique<Tokenizer>(tokenizer_data_from_hf(dir));
    tmpl = hf_chat_template(dir);
  } else {
    const gguf::GgufFile f = gguf::GgufFile::open(o.model);
    m.tokenizer = std::make_unique<Tokenizer>(tokenizer_data_from_gguf(f));
    tmpl = f.get_string("tokenizer.chat_template", "");
    if (!rotations && wants_rotations) rotations = read_embedded_rotations(f);
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
  m.transformer = std::make_unique<Transformer>(load_model_weights(*src));
  if (rotations) apply_clip_flags(o, *rotations);
  m.transformer->configure_kv(kv, rotations ? &*rotations : nullptr);
  if (m.tokenizer->n_vocab() != m.transformer->config().n_vocab)
    fail("'{}': tokenizer has {} tokens but the embedding has {} rows", o.model, m.tokenizer->n_vocab(),
         m.transformer->config().n_vocab);
  m.load_seconds = seconds_since(t0);
  if (o.verbose) {
    const ModelConfig& c = m.transformer->config();
    fmt::print(stderr, "model: {} ({}), {} layers, n_embd {}, heads {}/{}, head_dim {}, vocab {}, weights {} in f32, loaded in {:.2f} s\n",
               c.name, arch_name(c.arch), c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads, c.head_dim, c.n_vocab,
               format_bytes(m.transformer->weights().n_bytes()), m.load_seconds);
  }
  return m;
}

GenerationStats generate(LoadedModel& m, KvCache& cache, SeqId seq, const std::vector<int32_t>& prompt,
                         int n_predict, Sampler& sampler, const std::function<bool(int32_t)>& on_token) {
  GenerationStats st;
  std::vector<float> logits;
  std::vector<int32_t> history(prompt);
  auto t0 = std::chrono::steady_clock::now();
  if (!prompt.empty()) m.transformer->forward(cache, seq, prompt, LogitsFor::last, logits);
  st.n_prompt = int64_t(prompt.size());
  st.prompt_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n_predict; ++i) {
    if (logits.empty()) break;
    const int32_t id = sampler.sample(logits, history);
    if (m.tokenizer->is_eog(id)) break;
    ++st.n_generated;
    history.push_back(id);
    if (!on_token(id)) break;
    if (i + 1 == n_predict) break;  // no forward pass for a token nobody will sample from
    if (cache.length(seq) + 1 > cache.capacity_tokens()) break;
    const int32_t one[1] = {id};
    m.transformer->forward(cache, seq, one, LogitsFor::last, logits);
  }
  st.generate_seconds = seconds_since(t0);
  return st;
}

std::string Utf8Stream::push(const std::string& bytes) {
  pending_ += bytes;
  // Find the end of the last complete character.
  size_t end = pending_.size();
  size_t i = end;
  while (i > 0 && end - i < 4) {
    const auto c = static_cast<unsigned char>(pending_[i - 1]);
    if ((c & 0xC0) != 0x80) {  // a lead byte (or ASCII) at i-1
      const size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
      if (end - (i - 1) < need) end = i - 1;  // incomplete: hold it back
      break;
    }
    --i;
  }
  std::string out = pending_.substr(0, end);
  pending_.erase(0, end);
  return out;
}

std::string Utf8Stream::flush() { return std::exchange(pending_, {}); }

std::string read_text_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}'{}'", what, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  if (!out) fail("cannot write '{}'", path);
  out << j.dump(2) << "\n";
}

std::string format_bytes(int64_t bytes) {
  if (bytes >= (1LL << 30)) return fmt::format("{:.2f} GiB", double(bytes) / (1LL << 30));
  if (bytes >= (1LL << 20)) return fmt::format("{:.2f} MiB", double(bytes) / (1LL << 20));
  if (bytes >= (1LL << 10)) return fmt::format("{:.2f} KiB", double(bytes) / (1LL << 10));
  return fmt::format("{} B", bytes);
}

void print_kv_memory(const KvCache& cache, SeqId seq) {
  const KvShape& s = cache.shape();
  const int64_t n = cache.length(seq);
  const int64_t bf16_bytes = 2LL * 2 * s.n_layers * s.n_kv_heads * s.head_dim * n;
  const int64_t used = cache.bytes_used(seq);
  fmt::print(stderr,
             "KV cache ({}): {} tokens ({} history), {} at {:.2f} bits/element; BF16 KV would hold {}: {:.2f}x less\n",
             cache.spec().name(), n, cache.history_tokens(seq), format_bytes(used), cache.bits_per_element(seq),
             format_bytes(bf16_bytes), used ? double(bf16_bytes) / double(used) : 1.0);
}

}  // namespace oscar::cli
