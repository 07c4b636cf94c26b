// oscar serve: an OpenAI-compatible HTTP server over one loaded model, with continuous
// batching on one engine thread (src/oscar/serve/). Checks flags and the model's shape
// before the weights load, prints the KV plan, serves until SIGTERM / SIGINT, then drains.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "commands.h"
#include "common.h"
#include "oscar/core/error.h"
#include "oscar/engine/kv_budget.h"
#include "oscar/model/weight_source.h"
#include "oscar/serve/http_server.h"

namespace oscar::cli {

namespace {
struct ServeOptions {
  ModelOptions model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string model_name;
  int max_seqs = 8;
  double kv_mem_mib = 0;    // 0: room for max_seqs sequences of -c tokens
  int step_tokens = 0;      // 0: the backend's (512 on the CPU, 4096 on the GPU: its rows per forward)
  double output_reserve = 1.0;
  double swap_space_gib = 4;   // host memory for preempted sequences' KV pages
  int max_connections = 1024;  // open at once; up to 64 more get 503
  int read_timeout = 5;        // seconds a connection may send nothing
  int request_timeout = 20;    // seconds a request's headers and body may take to arrive
  double shutdown_timeout = 30;
  bool no_prefix_cache = false;
};

// What, besides the KV format the cache adds itself, makes equal tokens give other pages:
// the model and the rotations (by path, size and modification time).
std::string prefix_salt(const ModelOptions& m) {
  auto stamp = [](const std::string& path) {
    std::error_code ec;
    if (path.empty() || !std::filesystem::exists(path, ec)) return std::string("-");
    const auto t = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
    const auto size = std::filesystem::is_regular_file(path, ec) ? std::filesystem::file_size(path, ec) : 0;
    return fmt::format("{}:{}:{}", std::filesystem::absolute(path, ec).string(), size, t);
  };
  return fmt::format("model {}|rotations {}|kv-layers {}", stamp(m.model), stamp(m.rotations), m.kv_layers.value_or(""));
}

// Blocks SIGTERM and SIGINT in this thread and every thread it starts, so that only
// sigwait() below sees them.
sigset_t block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// What can be refused without reading the weights: the device, the KV format, the
// architecture and head_dim.
void check_before_loading(const ServeOptions& o) {
  check_device(o.model.device);  // a CUDA build with a GPU, or a clear refusal
  const KvSpec kv = kv_spec_from(o.model);
  auto src = open_weight_source(o.model.model);
  const ModelConfig& c = src->config();
  kv.validate_layers(c.n_layers);
  if (kv.quantized() && kv.group > c.head_dim && o.model.kv_group)
    fail("--kv-group {} is larger than the model's head_dim {}", kv.group, c.head_dim);
  if (o.model.device == "cuda" && c.head_dim != 64 && c.head_dim != 128)
    fail("serve --device cuda: head_dim {} is not supported by the CUDA kernels (64 or 128)", c.head_dim);
  fmt::print(stderr, "serve: {} ({}), {} layers, {} KV heads × head_dim {}, KV '{}' on the {}\n", c.name,
             arch_name(c.arch), c.n_layers, c.n_kv_heads, c.head_dim, kv.name(), o.model.device == "cuda" ? "GPU" : "CPU");
}

int serve(const ServeOptions& o) {
  const sigset_t stop_signals = block_stop_signals();
  check_before_loading(o);
  serve::Metrics metrics;
  serve::ServerConfig sc;
  sc.host = o.host;
  sc.port = o.port;
  sc.api_key = o.api_key;
  sc.model_name = o.model_name.empty() ? std::filesystem::path(o.model.model).stem().string() : o.model_name;
  sc.max_connections = o.max_connections;
  sc.read_timeout_s = o.read_timeout;
  sc.request_timeout_s = o.request_timeout;
  // A descriptor per connection: the soft limit (often 1024) up to the hard one.
  if (rlimit rl{}; getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  serve::HttpServer http(sc, metrics);
  const int port = http.bind();
  std::thread http_thread([&] { http.listen(); });
  struct Joiner {  // the HTTP thread stops on every way out of this function
    serve::HttpServer& h;
    std::thread& t;
    ~Joiner() {
      h.stop();
      if (t.joinable()) t.join();
    }
  } joiner{http, http_thread};
  fmt::print(stderr, "serve: loading on {}:{} (/health answers 503 until ready)\n", o.host, port);

  LoadedModel m = load_model(o.model);
  const int64_t ctx = engine::context_limit(o.model, m.transformer->config());
  const int64_t budget = int64_t(o.kv_mem_mib * 1024 * 1024);
  engine::RunnerPlan plan;
  plan.device = o.model.device, plan.max_seqs = o.max_seqs, plan.ctx = ctx;
  plan.budgeted = true, plan.kv_budget_bytes = budget, plan.step_tokens = o.step_tokens;
  engine::OpenedRunner opened = engine::open_runner(*m.transformer, plan);
  fmt::print(stderr, "{}\n", opened.plan);
  const std::unique_ptr<engine::Runner> runner = std::move(opened.runner);
  if (o.no_prefix_cache) {
    fmt::print(stderr, "prefix cache: off (--no-prefix-cache)\n");
  } else {
    try {
      const int block = runner->enable_prefix_cache(prefix_salt(o.model));
      fmt::print(stderr, "prefix cache: on (whole pages of {} tokens, shared read-only, evicted LRU)\n", block);
    } catch (const Error& e) {
      fmt::print(stderr, "prefix cache: off ({})\n", e.what());
    }
  }
  runner->set_swap_space(int64_t(o.swap_space_gib * double(1 << 30)));
  fmt::print(stderr, "engine: {}\n", runner->describe());
  serve::SchedulerConfig sched_config{o.max_seqs, opened.step_tokens, ctx};
  sched_config.output_reserve = o.output_reserve;
  serve::Scheduler scheduler(*runner, *m.tokenizer, sched_config, metrics);
  scheduler.start();
  http.set_model(serve::ServedModel{&scheduler, m.tokenizer.get(), m.chat_template, m.default_system, ctx});
  fmt::print(stderr, "serve: listening on http://{}:{} (model '{}', {})\n", o.host, port, sc.model_name,
             o.api_key.empty() ? "no API key" : "API key required");

  int sig = 0;
  sigwait(&stop_signals, &sig);
  fmt::print(stderr, "serve: {} received: no new requests; finishing the running ones (up to {:.0f} s)\n",
             sig == SIGTERM ? "SIGTERM" : "SIGINT", o.shutdown_timeout);
  scheduler.close_admission();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.shutdown_timeout);
  while (!scheduler.idle() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (!scheduler.idle()) {
    fmt::print(stderr, "serve: cancelling what is still running\n");
    scheduler.cancel_all();
  }
  scheduler.stop();
  http.stop();
  http_thread.join();
  fmt::print(stderr, "serve: stopped\n");
  return 0;
}
}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  add_model_options(*cmd, o->model);
  cmd->add_option("--device", o->model.device, "where the model runs: cpu, or cuda (the GPU backend)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--host", o->host, "address to listen on (default: loopback only)");
  cmd->add_option("--port", o->port, "port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' on every route but /health");
  cmd->add_option("--model-name", o->model_name, "model id in /v1/models and responses (default: the file name)");
  cmd->add_option("--max-seqs", o->max_seqs, "sequences in the running batch at most")->check(CLI::Range(1, 4096));
  cmd->add_option("--kv-mem", o->kv_mem_mib, "KV cache budget in MiB (default: --max-seqs sequences of -c tokens)")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--step-tokens", o->step_tokens,
                  "tokens per engine step: decode tokens, then prefill chunks (0: 512 on the CPU, 4096 on the GPU)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--output-reserve", o->output_reserve,
                  "share of each running request's remaining max_tokens whose KV pages admission holds back: 1 "
                  "queues what would not fit to its end (no preemption), 0 admits by the prompt alone and "
                  "preempts sequences that outgrow the pages (swapped out, see --swap-space)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--swap-space", o->swap_space_gib,
                  "GiB of host memory for the KV pages of preempted sequences, restored bit for bit on resuming "
                  "(0: recompute them instead, from what the prefix cache kept)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--max-connections", o->max_connections,
                  "connections open at once (idle and half-sent ones wait on one thread; a request that has "
                  "arrived takes a worker); up to 64 more are answered 503 with Retry-After, past those closed")
      ->check(CLI::Range(4, 65536));
  cmd->add_option("--read-timeout", o->read_timeout, "seconds: a request that gets no new byte for this long is answered 408 and closed; an idle "
                  "connection is closed after it")
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--request-timeout", o->request_timeout,
                  "seconds a request's headers and body may take to arrive, however they trickle in (408 after)")
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout, "seconds SIGTERM waits for running requests")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_flag("--no-prefix-cache", o->no_prefix_cache, "do not share the pages of repeated prompt prefixes");
  cmd->callback([o] { serve(*o); });
}

}  // namespace oscar::cli
