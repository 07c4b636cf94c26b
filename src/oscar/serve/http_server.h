// The HTTP front of `oscar serve` (cpp-httplib): OpenAI-compatible routes, API key,
// size limits, /health, /metrics. Its threads parse, tokenize and stream; the engine
// work goes through the Scheduler. It listens before the model is ready (then /health
// and every other route answer 503), so that a load balancer sees the process early.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "oscar/serve/metrics.h"
#include "oscar/serve/scheduler.h"
#include "oscar/text/chat_template.h"
#include "oscar/text/tokenizer.h"

namespace httplib {
class Server;
}

namespace oscar::serve {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                      // 0: any free port
  std::string api_key;                  // "": no key needed
  std::string model_name;               // the id /v1/models lists
  size_t max_body_bytes = 8u << 20;     // larger bodies get 413
  size_t max_header_bytes = 8u << 10;   // larger header blocks get 431
  // Connections open at once (waiting in the reception or served: deadline_server.h); up to
  // max_overflow more are answered 503 with Retry-After, past those they are closed.
  int max_connections = 1024;
  int max_overflow = 64;
  int read_timeout_s = 5;               // a stalled request, or an idle connection, is closed after this
  int request_timeout_s = 20;           // a request's headers and body must arrive within this (else 408)
};

// What the routes serve once the model is loaded.
struct ServedModel {
  Scheduler* scheduler = nullptr;
  const Tokenizer* tokenizer = nullptr;
  ChatTemplateKind chat_template = ChatTemplateKind::none;
  std::string default_system;
  int64_t ctx = 0;  // tokens per sequence
};

class HttpServer {
 public:
  HttpServer(ServerConfig config, Metrics& metrics);
  ~HttpServer();

  int bind();          // binds host:port; returns the port. Throws oscar::Error when it cannot.
  void listen();       // serves until stop(); call from its own thread
  void stop();
  void set_model(ServedModel m);  // the server becomes ready

 private:
  void routes();
  ServerConfig config_;
  Metrics& metrics_;
  ServedModel model_;
  std::atomic<bool> ready_{false};
  std::unique_ptr<httplib::Server> svr_;
  int listen_fd_ = -1;  // the listening socket, whose backlog bind() raises
};

// Constant-time comparison for API keys (no early exit on the first differing byte).
bool keys_equal(std::string_view expected, std::string_view given);

}  // namespace oscar::serve
