// Each subcommand registers its flags and its action on the app.
#pragma once
#include <CLI/CLI.hpp>

namespace oscar::cli {

void add_run_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_ppl_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_rotations_command(CLI::App& app);
void add_niah_command(CLI::App& app);
void add_eval_kv_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_make_model_command(CLI::App& app);

}  // namespace oscar::cli
