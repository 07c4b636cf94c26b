// The flags of the searches `oscar calibrate` and `oscar rotations tune` run after the fit
// (the searches themselves: oscar/calib/tune.h), and the KV type they measure.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "common.h"
#include "oscar/calib/tune.h"

namespace oscar::cli {

using calib::TuneOptions;
using calib::tune_rotations;
using calib::fit_key_scales;

// --clip-search (with clip_default also --no-clip-search), --kv-budget, --kv-budget-types,
// --probe-tokens, --probe-queries, --k-mean-search, --k-mean-check; with per_source_probes also
// --clip-objective.
void add_tune_options(CLI::App& cmd, TuneOptions& o, bool clip_default, bool per_source_probes = false);
// The KV type name the searches measure: --kv, or int2-oscar for the default (bf16).
std::string tune_base_kv(const ModelOptions& o);
// The calibrated KV type the searches measure: --kv when it names one, else int2-oscar,
// with the rotations' group and windows. Throws when --kv names another kind of type.
KvSpec tune_base_spec(const ModelOptions& o, int group, int sink, int recent, int head_dim);

// `oscar rotations tune`: the same searches on rotations already fitted.
void add_rotations_tune_command(CLI::App& rotations);

}  // namespace oscar::cli
