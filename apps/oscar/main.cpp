// oscar: one CLI for running, chatting, evaluating and inspecting models.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"
#include "oscar/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"oscar: LLM inference with a 2-bit KV cache (OSCAR)", "oscar"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "oscar 0.1.0");
  oscar::cli::add_run_command(app);
  oscar::cli::add_chat_command(app);
  oscar::cli::add_ppl_command(app);
  oscar::cli::add_inspect_command(app);
  oscar::cli::add_bench_command(app);
  oscar::cli::add_calibrate_command(app);
  oscar::cli::add_rotations_command(app);
  oscar::cli::add_niah_command(app);
  oscar::cli::add_eval_kv_command(app);
  oscar::cli::add_serve_command(app);
  oscar::cli::add_make_model_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const oscar::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {  // e.g. a CUDA error from the GPU backend
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
