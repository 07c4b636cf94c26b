// oscar bench: prefill and decode speed at given context depths, like llama-bench's
// pp/tg tests: prefill P tokens from an empty cache, then decode N tokens after them.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>

#include "commands.h"
#include "common.h"
#include "device_generate.h"
#include "oscar/core/error.h"
#include "oscar/core/thread_pool.h"

namespace oscar::cli {

namespace {
struct BenchOptions {
  ModelOptions model;
  std::vector<int> prompts = {512};
  int n_gen = 32;
  int reps = 1;
  std::string json_out;
};

int bench(const BenchOptions& o) {
  check_device(o.model.device);
  LoadedModel m = load_model(o.model);
  const ModelConfig& c = m.transformer->config();
  const bool on_gpu = o.model.device == "cuda";
  DeviceBenchFn gpu;
  if (on_gpu) {
    int longest = 0;
    for (int p : o.prompts) longest = std::max(longest, p);
    gpu = device_bench(m, int64_t(longest) + o.n_gen + 1);
  }
  const std::string where = on_gpu ? "cuda" : std::to_string(num_threads());
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(0, c.n_vocab - 1);
  nlohmann::json rows = nlohmann::json::array();
  fmt::print("| model | kv | threads/device | depth | prefill tok/s | decode tok/s |\n|---|---|---|---|---|---|\n");
  for (int p : o.prompts) {
    if (p <= 0) fail("bench: prompt length {} must be positive", p);
    double best_pp = 0, best_tg = 0;
    for (int r = 0; r < o.reps && on_gpu; ++r) {
      std::vector<int32_t> prompt(static_cast<size_t>(p)), gen(static_cast<size_t>(o.n_gen));
      for (auto& t : prompt) t = tok(rng);
      for (auto& t : gen) t = tok(rng);
      const DeviceBenchResult g = gpu(prompt, gen);
      best_pp = std::max(best_pp, g.prefill_tokens_per_s);
      best_tg = std::max(best_tg, g.decode_tokens_per_s);
    }
    for (int r = 0; r < o.reps && !on_gpu; ++r) {
      KvCache cache = m.transformer->make_cache(int64_t(p) + o.n_gen);
      const SeqId seq = cache.add_sequence();
      std::vector<int32_t> prompt(static_cast<size_t>(p));
      for (auto& t : prompt) t = tok(rng);
      std::vector<float> logits;
      auto t0 = std::chrono::steady_clock::now();
      m.transformer->forward(cache, seq, prompt, LogitsFor::last, logits);
      best_pp = std::max(best_pp, p / seconds_since(t0));
      t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < o.n_gen; ++i) {
        const int32_t one[1] = {tok(rng)};
        m.transformer->forward(cache, seq, one, LogitsFor::last, logits);
      }
      if (o.n_gen > 0) best_tg = std::max(best_tg, o.n_gen / seconds_since(t0));
    }
    fmt::print("| {} | {} | {} | {} | {:.1f} | {:.2f} |\n", c.name, o.model.kv, where, p, best_pp, best_tg);
    rows.push_back({{"model", c.name}, {"kv", o.model.kv}, {"threads", num_threads()}, {"device", o.model.device},
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
  cmd->add_option("--json", o->json_out, "also write the rows as JSON to this file");
  cmd->add_option("--device", o->model.device, "where the model runs: cpu, or cuda (the GPU backend)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->callback([o] { bench(*o); });
}

}  // namespace oscar::cli
