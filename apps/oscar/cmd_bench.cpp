// oscar bench: prefill and decode speed at given context depths, like llama-bench's
// pp/tg tests: prefill P tokens from an empty cache, then decode N tokens after them.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>

#include "commands.h"
#include "common.h"
#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"
#include "oscar/engine/generate.h"

namespace oscar::cli {

namespace {
struct BenchOptions {
  ModelOptions model;
  std::vector<int> prompts = {512};
  int n_gen = 32;
  int reps = 1;
  // Prompt tokens per forward pass; −1: 512 on the CPU (as `oscar run` and llama.cpp's
  // ubatch: a 16K prompt in one pass held 2.4 GB of activations), on the GPU its runner's
  // default rows per forward (kDefaultForwardRows), which it splits a prompt into itself.
  int batch = -1;
  std::string json_out;
};

int bench(const BenchOptions& o) {
  check_device(o.model.device);
  LoadedModel m = load_model(o.model);
  const ModelConfig& c = m.transformer->config();
  int longest = 0;
  for (int p : o.prompts) longest = std::max(longest, p);
  // One sequence at a time through the engine's Runner and its one generation loop, with
  // the decoded tokens forced (random ids, like llama-bench's tg test).
  const std::unique_ptr<engine::Runner> runner = make_runner(m, o.model.device, 1, int64_t(longest) + o.n_gen + 2, o.batch);
  const std::string where = o.model.device == "cuda" ? "cuda" : std::to_string(num_threads());
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(0, c.n_vocab - 1);
  Sampler sampler(SamplerParams{.temperature = 0.0f});
  nlohmann::json rows = nlohmann::json::array();
  fmt::print("| model | kv | threads/device | depth | prefill tok/s | decode tok/s |\n|---|---|---|---|---|---|\n");
  const int64_t batch = o.batch >= 0 ? o.batch : o.model.device == "cuda" ? 0 : 512;
  for (int p : o.prompts) {
    if (p <= 0) fail("bench: prompt length {} must be positive", p);
    double best_pp = 0, best_tg = 0;
    for (int r = 0; r < o.reps; ++r) {
      std::vector<int32_t> prompt(static_cast<size_t>(p)), gen(static_cast<size_t>(o.n_gen) + 1);
      for (auto& t : prompt) t = tok(rng);
      for (auto& t : gen) t = tok(rng);
      const SeqId seq = runner->add_sequence();
      // n_gen + 1 tokens: the first comes from the prompt's logits, then n_gen decode steps.
      const engine::GenerationStats st = engine::generate(*runner, *m.tokenizer, seq, prompt, o.n_gen + 1, sampler,
                                                          [](int32_t) { return true; }, batch, gen);
      runner->free_sequence(seq);
      best_pp = std::max(best_pp, double(p) / st.prompt_seconds);
      if (o.n_gen > 0 && st.n_generated > 1)
        best_tg = std::max(best_tg, double(st.n_generated - 1) / st.generate_seconds);
    }
    fmt::print("| {} | {} | {} | {} | {:.1f} | {:.2f} |\n", c.name, o.model.kv, where, p, best_pp, best_tg);
    rows.push_back({{"model", c.name}, {"kv", o.model.kv}, {"threads", num_threads()}, {"device", o.model.device}, {"batch", batch},
                    {"depth", p},
                    {"n_gen", o.n_gen}, {"prefill_tokens_per_s", best_pp}, {"decode_tokens_per_s", best_tg}});
  }
  if (!o.json_out.empty()) {
    write_json_file(o.json_out, rows);
  }
  return 0;
}
}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "prefill and decode tokens/s at given context depths");
  add_model_options(*cmd, o->model, false);
  cmd->add_option("-p,--n-prompt", o->prompts, "prefill lengths (context depth), e.g. -p 512,4096")->delimiter(',');
  cmd->add_option("-n,--n-gen", o->n_gen, "tokens to decode after each prefill")->check(CLI::Range(0, 1 << 16));
  cmd->add_option("-r,--repetitions", o->reps, "repetitions (best is reported)")->check(CLI::Range(1, 100));
  cmd->add_option("-b,--batch-size", o->batch,
                  "prompt tokens per forward pass (default 512 on the CPU, 4096 on the GPU; 0: the whole prompt on the CPU)")
      ->check(CLI::Range(-1, 1 << 24));
  cmd->add_option("--json", o->json_out, "also write the rows as JSON to this file");
  cmd->add_option("--device", o->model.device, "where the model runs: cpu, or cuda (the GPU backend)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->callback([o] { bench(*o); });
}

}  // namespace oscar::cli
