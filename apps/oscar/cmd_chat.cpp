// oscar chat: an interactive conversation. The KV cache keeps the whole dialogue;
// each turn appends only the new tokens.
#include <fmt/format.h>

#include <cstdio>
#include <iostream>

#include "commands.h"
#include "common.h"
#include "oscar/core/error.h"

namespace oscar::cli {

namespace {
struct ChatOptions {
  ModelOptions model;
  SamplerParams sampler;
  std::string system;
  int n_predict = 512;
};

int chat(const ChatOptions& o) {
  LoadedModel m = load_model(o.model);
  if (m.chat_template == ChatTemplateKind::none) fail("chat: the model has no known chat template");
  CpuRunner runner(*m.transformer, m.transformer->make_cache(o.model.ctx));
  KvCache& cache = runner.cache();
  const SeqId seq = runner.add_sequence();
  Sampler sampler(o.sampler);
  std::vector<ChatMessage> history;
  if (!o.system.empty()) history.push_back({"system", o.system});
  std::string rendered;  // the conversation text already in the cache
  fmt::print(stderr, "chat with {} — type a message, an empty line or /exit to quit\n", m.transformer->config().name);
  std::string line;
  while (true) {
    fmt::print("> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line) || line.empty() || line == "/exit") break;
    history.push_back({"user", line});
    const std::string full = apply_chat_template(m.chat_template, history, true, m.default_system);
    // The template only appends, so the new text is the suffix after what was rendered.
    const std::string delta = full.starts_with(rendered) ? full.substr(rendered.size()) : full;
    if (!full.starts_with(rendered)) cache.clear_sequence(seq);
    const std::vector<int32_t> ids = m.tokenizer->encode(delta, cache.length(seq) == 0 && m.tokenizer->add_bos(), true);
    if (cache.length(seq) + int64_t(ids.size()) + 1 >= cache.capacity_tokens()) {
      fmt::print(stderr, "[context full ({} tokens): start a new chat or raise -c]\n", cache.capacity_tokens());
      break;
    }
    std::string reply;
    Utf8Stream out;
    std::vector<int32_t> reply_ids;
    engine::generate(runner, *m.tokenizer, seq, ids, o.n_predict, sampler, [&](int32_t id) {
      reply_ids.push_back(id);
      const std::string piece = m.tokenizer->token_to_piece(id);
      reply += piece;
      fmt::print("{}", out.push(piece));
      std::fflush(stdout);
      return true;
    });
    fmt::print("{}\n", out.flush());
    history.push_back({"assistant", reply});
    // The last sampled token is not in the cache yet; re-render and let the next turn's
    // delta carry it (and the end-of-turn marker) into the cache.
    rendered = full + m.tokenizer->decode(std::span<const int32_t>(reply_ids.data(), reply_ids.empty() ? 0 : reply_ids.size() - 1), true);
  }
  print_kv_memory(runner, seq, m.transformer->kv_spec().name());
  return 0;
}
}  // namespace

void add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "interactive chat using the model's chat template");
  add_model_options(*cmd, o->model);
  add_sampler_options(*cmd, o->sampler);
  cmd->add_option("--system", o->system, "system message");
  cmd->add_option("-n,--n-predict", o->n_predict, "maximum tokens per reply")->check(CLI::Range(1, 1 << 20));
  cmd->callback([o] { chat(*o); });
}

}  // namespace oscar::cli
