#include "calibrate_tune.h"

#include <algorithm>

#include "oscar/core/error.h"

namespace oscar::cli {

void add_tune_options(CLI::App& cmd, TuneOptions& o, bool clip_default, bool per_source_probes) {
  o.clip_search_default = clip_default;
  auto* on = cmd.add_flag("--clip-search", o.clip_search,
                          clip_default ? "choose each layer's K and V clip ratio by the attention-output error on "
                                         "held-back calibration text (the default)"
                                       : "choose each layer's K and V clip ratio by the attention-output error on "
                                         "calibration text");
  if (clip_default)
    cmd.add_flag("--no-clip-search", o.no_clip_search, "keep the reference's clip ratios (K 0.96, V 0.92) in every layer")
        ->excludes(on);
  cmd.add_option("--kv-budget", o.kv_budget,
                 "choose per-layer KV types (int2-oscar, or an upgrade from --kv-budget-types) whose mean history "
                 "bits per element stay within BITS; stored with the rotations and used by --kv int2-oscar*")
      ->check(CLI::Range(0.0, 32.0));
  cmd.add_option("--kv-budget-types", o.budget_types, "the upgrades --kv-budget may choose (default int4,int8)")
      ->delimiter(',');
  cmd.add_option("--probe-tokens", o.probe_tokens,
                 "calibration tokens (after the fitted ones) the searches measure on (default 2048)")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 24));
  cmd.add_option("--probe-queries", o.probe_queries, "last positions whose attention output is scored (default 256)");
  cmd.add_flag("--k-mean-search", o.k_mean_search,
               "keep each layer's key mean (--k-mean) only where the layer's probe error is lower with it than "
               "without (measured before the clip search)");
  cmd.add_flag("--k-mean-check", o.k_mean_check,
               "after the clip search, run the model over the probe text with BF16 KV, with the KV type and with it "
               "less every key mean, and drop the key means only if the model's KL divergence to BF16 (over the "
               "positions past the BF16 windows) is lower without them by more than two standard errors of the "
               "paired difference: a choice per model, end to end");
  if (per_source_probes)
    cmd.add_option("--clip-objective", o.clip_objective,
                   "what the clip search minimizes: mean (the error on one probe that mixes every calibration source; "
                   "the default) or worst (the largest of the errors on one probe per source, each --probe-tokens "
                   "long: clips for the worst domain; --k-mean-search then measures the same way)")
        ->check(CLI::IsMember({"mean", "worst"}));
}

std::string tune_base_kv(const ModelOptions& o) { return o.kv == "bf16" ? "int2-oscar" : o.kv; }

KvSpec tune_base_spec(const ModelOptions& o, int group, int sink, int recent, int head_dim) {
  ModelOptions b = o;
  b.kv = tune_base_kv(o);
  b.kv_layers.reset();
  KvSpec s = kv_spec_from(b);
  if (s.rotation != KvRotation::calibrated)
    fail("--clip-search / --kv-budget tune an OSCAR KV type (--kv int2-oscar*), not '{}'", s.mode);
  s.group = std::min(group, head_dim), s.sink = sink, s.recent = recent;
  s.validate();
  return s;
}

}  // namespace oscar::cli
