// oscar niah: needle-in-a-haystack retrieval (RULER's niah_single) over a grid of
// prompt lengths × needle depths, through the configured KV cache format; prints a
// correct/trials table like the ppl summary, optionally JSON.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "commands.h"
#include "common.h"
#include "oscar/core/error.h"
#include "oscar/eval/niah.h"

namespace oscar::cli {

namespace {
struct NiahOptions {
  ModelOptions model;
  std::string haystack;
  std::vector<int64_t> lengths;  // empty: the defaults that fit
  std::vector<double> depths = {0, 25, 50, 75, 100};
  int trials = 1;
  uint64_t seed = 42;
  std::string json_out;
  bool no_chat = false;
};

constexpr int kMaxNew = 12;  // a 7-digit number and its full stop take well under 12 tokens

// The generated text on one progress line.
std::string one_line(std::string s) {
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

// Per-cell needles come from (seed, length, depth, trial), so a cell gets the same
// needles whatever else is on the grid, and every KV format sees the same prompts.
std::mt19937_64 cell_rng(uint64_t seed, int64_t length, double depth, int trial) {
  std::seed_seq s{uint32_t(seed), uint32_t(seed >> 32), uint32_t(length), uint32_t(std::llround(depth * 1000)),
                  uint32_t(trial)};
  return std::mt19937_64(s);
}

struct Cell {
  int64_t length = 0;
  double depth = 0;
  int trials = 0, correct = 0;
  int64_t min_tokens = 0, max_tokens = 0;  // real prompt lengths over the trials
  double bits = 0;                         // KV bits per element after the prompt
};

std::vector<int64_t> resolve_lengths(const NiahOptions& o, int64_t limit, const ModelConfig& c) {
  if (o.lengths.empty()) {
    std::vector<int64_t> out;
    for (int64_t l : {1024, 2048, 4096})
      if (l <= limit) out.push_back(l);
    if (out.empty()) out.push_back(limit);
    return out;
  }
  for (int64_t l : o.lengths)
    if (l > limit)
      fail("niah: length {} is larger than the context: at most {} tokens (-c {}, model trained for {})", l, limit,
           o.model.ctx, c.n_ctx_train);
  return o.lengths;
}

int niah(const NiahOptions& o) {
  // Flags first: fail before the slow part.
  for (int64_t l : o.lengths)
    if (l < 1) fail("niah: --lengths: {} is not a positive number of tokens", l);
  if (o.depths.empty()) fail("niah: --depths is empty");
  for (double d : o.depths)
    if (!(d >= 0.0 && d <= 100.0)) fail("niah: --depths: {} is outside 0..100 (percent)", d);
  if (o.trials < 1) fail("niah: --trials must be at least 1, got {}", o.trials);
  std::string text = read_text_file(o.haystack);
  if (text.empty()) fail("niah: haystack file '{}' is empty", o.haystack);

  check_device(o.model.device);
  LoadedModel m = load_model(o.model);
  const ModelConfig& c = m.transformer->config();
  const int64_t limit = std::min<int64_t>(o.model.ctx, c.n_ctx_train > 0 ? c.n_ctx_train : o.model.ctx);
  const std::vector<int64_t> lengths = resolve_lengths(o, limit, c);
  const int64_t max_len = *std::max_element(lengths.begin(), lengths.end());

  // Only the start of the filler is ever used: tokenize what can fill the longest
  // prompt (32 bytes per token is far more than any tokenizer needs), not a whole book.
  const size_t max_bytes = size_t(max_len) * 32 + 4096;
  if (text.size() > max_bytes) {
    const size_t cut = text.find_last_of(" \n", max_bytes);
    text.resize(cut == std::string::npos || cut == 0 ? max_bytes : cut);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> hay = m.tokenizer->encode(text, false, false);
  if (hay.empty()) fail("niah: haystack file '{}' gives no tokens", o.haystack);
  fmt::print(stderr, "haystack: {} tokens from '{}' in {:.2f} s{}\n", hay.size(), o.haystack, seconds_since(t0),
             int64_t(hay.size()) < max_len ? " (shorter than the longest prompt: it wraps around)" : "");

  NiahFormat prompt_format;
  prompt_format.chat = o.no_chat ? ChatTemplateKind::none : m.chat_template;
  prompt_format.default_system = m.default_system;
  prompt_format.add_bos = m.tokenizer->add_bos();
  // A length too short for the task fails now, not after the longer cells have run.
  const NiahNeedle probe{"x", "1234567"};
  build_niah_prompt(*m.tokenizer, hay, probe, 0, *std::min_element(lengths.begin(), lengths.end()), prompt_format);
  const std::string kv_name = m.transformer->kv_spec().name();
  fmt::print(stderr, "niah: lengths {}, depths {}%, {} trial(s) per cell, KV {}, {}\n", fmt::join(lengths, ","),
             fmt::join(o.depths, ","), o.trials, kv_name, prompt_format.chat == ChatTemplateKind::none ? "raw prompt" : "chat template");

  // One cache for every trial: room for the longest prompt and the answer.
  const std::unique_ptr<engine::Runner> runner = make_runner(m, o.model.device, 1, max_len + 16);
  std::vector<std::vector<Cell>> grid(lengths.size(), std::vector<Cell>(o.depths.size()));
  for (size_t li = 0; li < lengths.size(); ++li) {
    for (size_t di = 0; di < o.depths.size(); ++di) {
      Cell& cell = grid[li][di];
      cell.length = lengths[li];
      cell.depth = o.depths[di];
      for (int t = 0; t < o.trials; ++t) {
        const auto t1 = std::chrono::steady_clock::now();
        std::mt19937_64 rng = cell_rng(o.seed, cell.length, cell.depth, t);
        const NiahNeedle needle = random_needle(rng);
        const NiahPrompt p = build_niah_prompt(*m.tokenizer, hay, needle, cell.depth, cell.length, prompt_format);
        const SeqId seq = runner->add_sequence();
        const NiahGeneration g = niah_generate(*runner, *m.tokenizer, seq, p.ids, kMaxNew);
        runner->free_sequence(seq);
        const bool ok = niah_correct(g.text, needle.value);
        const int64_t n = int64_t(p.ids.size());
        cell.min_tokens = t == 0 ? n : std::min(cell.min_tokens, n);
        cell.max_tokens = std::max(cell.max_tokens, n);
        cell.bits = g.kv_bits_per_element;
        ++cell.trials;
        cell.correct += ok;
        fmt::print(stderr, "length {} ({} tokens) depth {:g}% trial {}/{}: expected {}, got \"{}\" {} ({:.1f} s)\n",
                   cell.length, n, cell.depth, t + 1, o.trials, needle.value, one_line(g.text), ok ? "ok" : "WRONG",
                   seconds_since(t1));
      }
    }
  }

  // Summary: rows are lengths, columns depths.
  const size_t longest = size_t(std::max_element(lengths.begin(), lengths.end()) - lengths.begin());
  const Cell& ref = grid[longest].back();
  fmt::print("\nniah: {}, KV {}, {:.3f} bits per element at {} tokens, {} trial(s) per cell, seed {}, {}\n",
             std::filesystem::path(o.model.model).filename().string(), kv_name, ref.bits, ref.max_tokens, o.trials,
             o.seed, prompt_format.chat == ChatTemplateKind::none ? "raw prompt" : "chat template");
  fmt::print("| length | tokens |");
  for (double d : o.depths) fmt::print(" {:g}% |", d);
  fmt::print(" accuracy |\n|---|---|");
  for (size_t i = 0; i < o.depths.size(); ++i) fmt::print("---|");
  fmt::print("---|\n");
  int total = 0, total_correct = 0;
  nlohmann::json cells = nlohmann::json::array();
  for (const auto& row : grid) {
    int64_t lo = row.front().min_tokens, hi = row.front().max_tokens;
    int n = 0, correct = 0;
    for (const Cell& cell : row) {
      lo = std::min(lo, cell.min_tokens), hi = std::max(hi, cell.max_tokens);
      n += cell.trials, correct += cell.correct;
      cells.push_back({{"length", cell.length}, {"tokens_min", cell.min_tokens}, {"tokens_max", cell.max_tokens},
                       {"depth", cell.depth}, {"trials", cell.trials}, {"correct", cell.correct}, {"kv", kv_name},
                       {"bits_per_element", cell.bits}});
    }
    fmt::print("| {} | {} |", row.front().length, lo == hi ? fmt::format("{}", lo) : fmt::format("{}-{}", lo, hi));
    for (const Cell& cell : row) fmt::print(" {}/{} |", cell.correct, cell.trials);
    fmt::print(" {:.1f}% |\n", 100.0 * correct / n);
    total += n, total_correct += correct;
  }
  fmt::print("Overall accuracy: {}/{} = {:.1f}%\n", total_correct, total, 100.0 * total_correct / total);

  if (!o.json_out.empty()) {
    const nlohmann::json j = {{"model", std::filesystem::path(o.model.model).filename().string()},
                              {"kv", kv_name},
                              {"bits_per_element", ref.bits},
                              {"chat_template", prompt_format.chat != ChatTemplateKind::none},
                              {"seed", o.seed},
                              {"trials", o.trials},
                              {"correct", total_correct},
                              {"total", total},
                              {"cells", cells}};
    write_json_file(o.json_out, j);
  }
  return 0;
}
}  // namespace

void add_niah_command(CLI::App& app) {
  auto o = std::make_shared<NiahOptions>();
  CLI::App* cmd = app.add_subcommand("niah", "needle-in-a-haystack retrieval accuracy (RULER niah_single)");
  add_model_options(*cmd, o->model);
  cmd->add_option("-f,--haystack", o->haystack, "plain text file used as filler")->required()->check(CLI::ExistingFile);
  cmd->add_option("--lengths", o->lengths,
                  "prompt lengths in tokens, each at most -c and the trained context (default 1024,2048,4096, those that fit)")
      ->delimiter(',');
  cmd->add_option("--depths", o->depths, "needle depths in percent of the haystack (default 0,25,50,75,100)")
      ->delimiter(',');
  cmd->add_option("--trials", o->trials, "needles per cell (default 1)");
  cmd->add_option("--seed", o->seed, "random seed for the needles (default 42)");
  cmd->add_option("--json", o->json_out, "also write the cells as JSON to this file");
  cmd->add_option("--device", o->model.device, "where the model runs: cpu, or cuda (the GPU backend)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--no-chat", o->no_chat, "raw prompt instead of the model's chat template");
  cmd->callback([o] { niah(*o); });
}

}  // namespace oscar::cli
