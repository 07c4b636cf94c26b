// oscar ppl: perplexity over a text file, printed like llama-perplexity.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "common.h"
#include "oscar/core/error.h"
#include "oscar/eval/perplexity.h"

namespace oscar::cli {

namespace {
struct PplOptions {
  ModelOptions model;
  std::string file;
  int chunks = -1;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int ppl(const PplOptions& o) {
  LoadedModel m = load_model(o.model);
  const std::string text = read_file(o.file);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> tokens = m.tokenizer->encode(text, false, false);
  fmt::print(stderr, "tokenized {} bytes into {} tokens in {:.2f} s\n", text.size(), tokens.size(), seconds_since(t0));
  PerplexityOptions po;
  po.n_ctx = o.model.ctx;
  po.max_chunks = o.chunks;
  po.bos_id = m.tokenizer->add_bos() ? m.tokenizer->bos_id() : -1;
  const int avail = int(int64_t(tokens.size()) / po.n_ctx);
  fmt::print(stderr, "perplexity: {} chunks of {} tokens, KV {}\n", o.chunks >= 0 ? std::min(o.chunks, avail) : avail,
             po.n_ctx, m.transformer->kv_spec().name());
  const auto t1 = std::chrono::steady_clock::now();
  const PerplexityResult r = perplexity(*m.transformer, tokens, po, [](int c, const NllStats& s) {
    fmt::print("[{}]{:.4f},", c + 1, s.ppl());
    std::fflush(stdout);
  });
  const double secs = seconds_since(t1);
  fmt::print("\nFinal estimate: PPL over {} chunks for n_ctx={} = {:.4f} +/- {:.5f}\n", r.n_chunks, r.n_ctx, r.ppl,
             r.ppl_stderr);
  fmt::print("KV cache bits per element at {} tokens: {:.3f} ({}, {} per sequence)\n", r.n_ctx, r.kv_bits_per_element,
             m.transformer->kv_spec().name(), format_bytes(r.kv_bytes));
  fmt::print(stderr, "evaluated {} tokens in {:.2f} s ({:.1f} tokens/s)\n", int64_t(r.n_chunks) * r.n_ctx, secs,
             double(r.n_chunks) * r.n_ctx / std::max(secs, 1e-9));
  return 0;
}
}  // namespace

void add_ppl_command(CLI::App& app) {
  auto o = std::make_shared<PplOptions>();
  o->model.ctx = 512;
  CLI::App* cmd = app.add_subcommand("ppl", "perplexity over a text file (llama-perplexity conventions)");
  add_model_options(*cmd, o->model);
  cmd->add_option("-f,--file", o->file, "text file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--chunks", o->chunks, "evaluate at most this many chunks (-1: all)");
  cmd->callback([o] { ppl(*o); });
}

}  // namespace oscar::cli
