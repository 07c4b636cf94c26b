// oscar make-model: a GGUF model with random BF16 weights at a named real shape, for
// benchmarks on machines with no network and no model files (the text it generates is
// garbage; its speed and memory are the real model's).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "commands.h"
#include "common.h"
#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/model/model_shapes.h"

namespace oscar::cli {

namespace {
struct MakeModelOptions {
  std::string shape;
  std::string output;
  uint64_t seed = 0;
  int vocab = 0;  // 0: the shape's
  std::string type = "bf16";  // the matrices' type: bf16 | q8_0
  int threads = 0;
};

int make_model(const MakeModelOptions& o) {
  ModelShape shape = find_model_shape(o.shape);
  if (o.vocab != 0) shape.config.n_vocab = o.vocab;
  set_num_threads(o.threads);
  const auto t0 = std::chrono::steady_clock::now();
  const GgmlType type = o.type == "q8_0" ? GgmlType::q8_0 : GgmlType::bf16;
  const RandomModelStats s = write_random_model(shape, o.output, o.seed, type);
  const double secs = seconds_since(t0);
  const double params = double(s.n_params);
  fmt::print("wrote {} (random {}, {} matrices, seed {}): {} tensors, {:.2f}{} parameters, {} in {:.1f} s ({:.2f} GB/s)\n", o.output,
             shape.name, ggml_type_name(type), o.seed, s.n_tensors, params >= 1e9 ? params * 1e-9 : params * 1e-6, params >= 1e9 ? "B" : "M",
             format_bytes(int64_t(s.file_bytes)), secs, double(s.file_bytes) * 1e-9 / std::max(secs, 1e-9));
  return 0;
}
}  // namespace

void add_make_model_command(CLI::App& app) {
  auto o = std::make_shared<MakeModelOptions>();
  CLI::App* cmd = app.add_subcommand("make-model", "write a GGUF model with random weights at a named real shape");
  cmd->add_option("--shape", o->shape, "model shape: " + known_model_shapes())->required();
  cmd->add_option("-o,--output", o->output, "output .gguf file")->required();
  cmd->add_option("--type", o->type, "the matrices' type: bf16, or q8_0 (half the file; the device loads it as BF16)")
      ->check(CLI::IsMember({"bf16", "q8_0"}));
  cmd->add_option("--seed", o->seed, "random seed (the same seed writes the same bytes)");
  cmd->add_option("--vocab", o->vocab, fmt::format("vocabulary size (default: the shape's; at least {})", k_random_vocab_min))
      ->check(CLI::Range(k_random_vocab_min, 1 << 24));
  cmd->add_option("-t,--threads", o->threads, "threads generating the weights (0: all cores)")->check(CLI::Range(0, 1024));
  cmd->callback([o] { make_model(*o); });
}

}  // namespace oscar::cli
