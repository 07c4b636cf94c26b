// oscar run: prompt in, completion streamed out, speed at the end.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "common.h"
#include "oscar/core/error.h"

namespace oscar::cli {

namespace {
struct RunOptions {
  ModelOptions model;
  SamplerParams sampler;
  std::string prompt;
  std::string prompt_file;
  std::string system;
  int n_predict = 128;
  int batch = 512;  // prompt tokens per forward pass: bounds activation memory on long prompts
  bool chat = false;
  bool no_display_prompt = false;
};

int run(RunOptions o) {
  check_device(o.model.device);
  if (!o.prompt_file.empty()) o.prompt = read_text_file(o.prompt_file, "prompt file ") + o.prompt;
  if (o.prompt.empty()) fail("give a prompt with -p or -f");
  LoadedModel m = load_model(o.model);
  std::string text = o.prompt;
  if (o.chat) {
    if (m.chat_template == ChatTemplateKind::none) fail("--chat: the model has no known chat template");
    std::vector<ChatMessage> msgs;
    if (!o.system.empty()) msgs.push_back({"system", o.system});
    msgs.push_back({"user", o.prompt});
    text = apply_chat_template(m.chat_template, msgs, true, m.default_system);
  }
  const std::vector<int32_t> prompt = m.tokenizer->encode(text, m.tokenizer->add_bos(), /*parse_special=*/true);
  if (prompt.empty()) fail("the prompt is empty");
  const int n_ctx = std::min(o.model.ctx, m.transformer->config().n_ctx_train > 0 ? m.transformer->config().n_ctx_train : o.model.ctx);
  if (int64_t(prompt.size()) >= n_ctx) fail("prompt has {} tokens, more than the context size {} (-c)", prompt.size(), n_ctx);
  const int64_t capacity = std::min<int64_t>(n_ctx, int64_t(prompt.size()) + o.n_predict);
  const std::unique_ptr<engine::Runner> runner = make_runner(m, o.model.device, 1, capacity);
  const SeqId seq = runner->add_sequence();
  Sampler sampler(o.sampler);

  if (!o.no_display_prompt && !o.chat) fmt::print("{}", o.prompt);
  if (o.chat || o.no_display_prompt) fmt::print(stderr, "prompt: {} tokens\n", prompt.size());
  std::fflush(stdout);
  Utf8Stream out;
  auto print_token = [&](int32_t id) {
    fmt::print("{}", out.push(m.tokenizer->token_to_piece(id)));
    std::fflush(stdout);
    return true;
  };
  const GenerationStats st = engine::generate(*runner, *m.tokenizer, seq, prompt, o.n_predict, sampler, print_token, o.batch);
  fmt::print("{}\n", out.flush());
  fmt::print(stderr, "\nprompt: {} tokens in {:.2f} s ({:.1f} tokens/s); generation: {} tokens in {:.2f} s ({:.1f} tokens/s)\n",
             st.n_prompt, st.prompt_seconds, double(st.n_prompt) / std::max(st.prompt_seconds, 1e-9), st.n_generated,
             st.generate_seconds, double(st.n_generated) / std::max(st.generate_seconds, 1e-9));
  print_kv_memory(*runner, seq, m.transformer->kv_spec().name());
  return 0;
}
}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "complete a prompt, streaming the output");
  add_model_options(*cmd, o->model);
  add_sampler_options(*cmd, o->sampler);
  cmd->add_option("-p,--prompt", o->prompt, "prompt text (appended to the file's text with -f)");
  cmd->add_option("-f,--file", o->prompt_file, "read the prompt from a file")->check(CLI::ExistingFile);
  cmd->add_option("-n,--n-predict", o->n_predict, "tokens to generate")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-b,--batch-size", o->batch,
                  "prompt tokens per forward pass (bounds activation memory; with native weights the logits do "
                  "not depend on it)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--chat", o->chat, "wrap the prompt in the model's chat template as a user message");
  cmd->add_option("--system", o->system, "system message (with --chat)");
  cmd->add_flag("--no-display-prompt", o->no_display_prompt, "do not echo the prompt");
  cmd->add_option("--device", o->model.device, "where the model runs: cpu, or cuda (the GPU backend)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->callback([o] { run(*o); });
}

}  // namespace oscar::cli
