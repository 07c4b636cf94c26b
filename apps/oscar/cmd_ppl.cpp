// oscar ppl: perplexity over a text file, printed like llama-perplexity; with
// --kl-divergence-base FILE it stores the run's log-probabilities, and with
// --kl-divergence as well it compares this run (any KV type) against them.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "commands.h"
#include "common.h"
#include "oscar/core/error.h"
#include "oscar/eval/kl_divergence.h"
#include "oscar/eval/perplexity.h"

namespace oscar::cli {

namespace {
struct PplOptions {
  ModelOptions model;
  std::string file;
  int chunks = -1;
  std::string kld_base;
  bool kld = false;
  bool ctx_given = false;
};

void print_kld_summary(const KldSummary& s) {
  fmt::print("\n====== Perplexity statistics ======\n");
  fmt::print("Mean PPL(Q)                   : {:10.6f}\n", s.ppl);
  fmt::print("Mean PPL(base)                : {:10.6f}\n", s.ppl_base);
  fmt::print("Mean PPL(Q)/PPL(base)         : {:10.6f} +/- {:10.6f}\n", s.ppl_ratio, s.ppl_ratio_stderr);
  fmt::print("\n====== KL divergence statistics ======\n");
  fmt::print("Mean    KLD: {:10.6f} +/- {:10.6f}\n", s.mean, s.mean_stderr);
  fmt::print("Maximum KLD: {:10.6f}\n", s.max);
  fmt::print("99.9%   KLD: {:10.6f}\n", s.p999);
  fmt::print("99.0%   KLD: {:10.6f}\n", s.p99);
  fmt::print("Median  KLD: {:10.6f}\n", s.median);
  fmt::print("\n====== Token probability statistics ======\n");
  fmt::print("Same top p: {:6.3f} +/- {:5.3f} %\n", 100.0 * s.same_top1, 100.0 * s.same_top1_stderr);
}

int ppl(PplOptions o) {
  if (o.kld && o.kld_base.empty()) fail("--kl-divergence needs --kl-divergence-base FILE (made by a run without --kl-divergence)");
  std::optional<KldBaseReader> base;
  if (o.kld) {
    base.emplace(o.kld_base);  // before the slow model load: a bad file fails at once
    if (o.ctx_given && o.model.ctx != base->n_ctx())
      fail("-c {} differs from the base file's n_ctx {} ('{}')", o.model.ctx, base->n_ctx(), o.kld_base);
    o.model.ctx = base->n_ctx();
  } else if (o.file.empty()) {
    fail("give the text with -f FILE");
  }
  check_device(o.model.device);
  LoadedModel m = load_model(o.model);
  PerplexityOptions po;
  po.n_ctx = o.model.ctx;
  po.max_chunks = o.chunks;
  std::vector<int32_t> tokens;
  if (base) {
    if (base->n_vocab() != m.transformer->config().n_vocab)
      fail("'{}' was made with a vocabulary of {}, this model has {}", o.kld_base, base->n_vocab(),
           m.transformer->config().n_vocab);
    tokens.assign(base->tokens().begin(), base->tokens().end());  // BOS already in place
    fmt::print(stderr, "KL divergence against '{}': {} chunks of {} tokens\n", o.kld_base, base->n_chunks(), base->n_ctx());
  } else {
    const std::string text = read_text_file(o.file);
    const auto t0 = std::chrono::steady_clock::now();
    tokens = m.tokenizer->encode(text, false, false);
    fmt::print(stderr, "tokenized {} bytes into {} tokens in {:.2f} s\n", text.size(), tokens.size(), seconds_since(t0));
    po.bos_id = m.tokenizer->add_bos() ? m.tokenizer->bos_id() : -1;
  }
  const int avail = int(int64_t(tokens.size()) / po.n_ctx);
  const int n_chunks = o.chunks >= 0 ? std::min(o.chunks, avail) : avail;
  fmt::print(stderr, "perplexity: {} chunks of {} tokens, KV {}\n", n_chunks, po.n_ctx, m.transformer->kv_spec().name());

  std::unique_ptr<KldBaseWriter> writer;
  KldStats kld;
  int64_t row = 0;
  ScoredPositionFn on_scored;
  if (base) {
    on_scored = [&](std::span<const float> logits, int32_t target) { kld.add(logits, base->row(row++), target); };
  } else if (!o.kld_base.empty() && n_chunks > 0) {
    writer = std::make_unique<KldBaseWriter>(o.kld_base, po.n_ctx, m.transformer->config().n_vocab, n_chunks,
                                             perplexity_chunks(tokens, po));
    on_scored = [&](std::span<const float> logits, int32_t) { writer->add(logits); };
  }

  // Each chunk is a sequence of the device's Runner, from an empty cache.
  const std::unique_ptr<engine::Runner> runner = make_runner(m, o.model.device, 1, po.n_ctx);
  const auto t1 = std::chrono::steady_clock::now();
  const PerplexityResult r = perplexity(
      *runner, tokens, po,
      [](int c, const NllStats& s) {
        fmt::print("[{}]{:.4f},", c + 1, s.ppl());
        std::fflush(stdout);
      },
      on_scored);
  const double secs = seconds_since(t1);
  if (writer) {
    writer->finish();
    fmt::print(stderr, "\nwrote the log-probabilities of {} positions to '{}'\n", int64_t(n_chunks) * kld_rows_per_chunk(po.n_ctx),
               o.kld_base);
  }
  fmt::print("\nFinal estimate: PPL over {} chunks for n_ctx={} = {:.4f} +/- {:.5f}\n", r.n_chunks, r.n_ctx, r.ppl,
             r.ppl_stderr);
  if (base) print_kld_summary(kld.summary());
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
  cmd->add_option("-f,--file", o->file, "text file (not needed with --kl-divergence: the base file holds the tokens)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--chunks", o->chunks, "evaluate at most this many chunks (-1: all)");
  cmd->add_option("--device", o->model.device, "where the model runs: cpu, or cuda (the GPU backend)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--kl-divergence-base", o->kld_base,
                  "file of full-vocabulary log-probabilities: written by this run, or read with --kl-divergence");
  cmd->add_flag("--kl-divergence", o->kld,
                "compare this run's token distributions with --kl-divergence-base (KLD, same top-1, PPL ratio)");
  cmd->callback([o, cmd] {
    o->ctx_given = cmd->count("-c") > 0;
    ppl(*o);
  });
}

}  // namespace oscar::cli
