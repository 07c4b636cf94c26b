#include "common.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/formats/gguf.h"
#include "oscar/rotation/rotation_gguf.h"
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
  cmd.add_option("--kv-k-type", o.kv_k_type,
                 "keys' history type when it should differ from the values' (int4 | int8; e.g. --kv int2-oscar "
                 "--kv-k-type int4: 4-bit keys, 2-bit values, same rotations; CPU only)")
      ->check(CLI::IsMember({"int4", "int8"}));
  cmd.add_option("--kv-v-type", o.kv_v_type, "values' history type when it should differ from the keys' (int4 | int8)")
      ->check(CLI::IsMember({"int4", "int8"}));
  cmd.add_option("--weights", o.weights,
                 "CPU weight storage: native (the file's quantized / F16 / BF16 rows, integer AVX2 kernels, no copy) "
                 "or f32 (dequantized at load: the exact reference path, 4 bytes per parameter)")
      ->check(CLI::IsMember({"native", "f32"}));
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


void write_json_file(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  if (!out) fail("cannot write '{}'", path);
  out << j.dump(2) << "\n";
}

void print_kv_memory(const engine::Runner& runner, SeqId seq, const std::string& kv_name) {
  const KvShape s = runner.kv_shape();
  const int64_t n = runner.length(seq);
  const int64_t bf16_bytes = 2LL * 2 * s.n_layers * s.n_kv_heads * s.head_dim * n;
  const int64_t used = runner.kv_bytes(seq);
  const double bits = n ? 8.0 * double(used) / (2.0 * s.n_layers * s.n_kv_heads * s.head_dim * double(n)) : 16.0;
  fmt::print(stderr, "KV cache ({}): {} tokens, {} at {:.2f} bits/element; BF16 KV would hold {}: {:.2f}x less\n",
             kv_name, n, format_bytes(used), bits, format_bytes(bf16_bytes), used ? double(bf16_bytes) / double(used) : 1.0);
}

std::unique_ptr<engine::Runner> make_runner(LoadedModel& m, const std::string& device, int max_seqs, int64_t capacity,
                                            int64_t forward_rows) {
  engine::RunnerPlan plan;
  plan.device = device, plan.max_seqs = max_seqs, plan.ctx = capacity, plan.forward_rows = forward_rows;
  engine::OpenedRunner r = engine::open_runner(*m.transformer, plan);
  if (device != "cpu") fmt::print(stderr, "device: {}\n", r.runner->describe());
  return std::move(r.runner);
}

}  // namespace oscar::cli
