#include "oscar/serve/http_server.h"

#include <httplib.h>
#include <fmt/format.h>

#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <random>

#include "oscar/core/error.h"
#include "oscar/serve/deadline_server.h"

namespace oscar::serve {

namespace {

using json = nlohmann::json;
constexpr auto kPoll = std::chrono::milliseconds(100);
constexpr auto kKeepAlive = std::chrono::seconds(2);  // an SSE comment after this long without output
// A non-streaming request not finished by then gets its headers (200) and a space every
// poll until its JSON: a write to a client that has gone fails, and the request is
// cancelled, as a stream's is. JSON allows leading whitespace.
constexpr auto kFirstByteDelay = std::chrono::seconds(1);

void reply_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(j.dump(), "application/json");
}

void reply_error(httplib::Response& res, int status, std::string_view message, std::string_view type,
                 std::string_view param = "") {
  reply_json(res, status, error_json(message, type, param));
}

std::string random_id(std::string_view prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}", prefix, rng());
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* status_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 408: return "request_timeout";
    case 413: return "request_too_large";
    case 431: return "request_header_fields_too_large";
    case 503: return "unavailable";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// The tokens of a request's prompt, or a RequestError naming the field.
std::vector<int32_t> prompt_tokens(const CompletionRequest& cr, const ServedModel& m) {
  const Tokenizer& tok = *m.tokenizer;
  std::vector<int32_t> ids;
  if (cr.endpoint == Endpoint::chat) {
    if (m.chat_template == ChatTemplateKind::none)
      throw RequestError("messages", "this model has no chat template: use /v1/completions");
    const std::string text = apply_chat_template(m.chat_template, cr.messages, true, m.default_system);
    ids = tok.encode(text, tok.add_bos(), /*parse_special=*/true);
  } else if (!cr.prompt_tokens.empty()) {
    for (size_t i = 0; i < cr.prompt_tokens.size(); ++i)
      if (cr.prompt_tokens[i] >= tok.n_vocab())
        throw RequestError(fmt::format("prompt[{}]", i),
                           fmt::format("token id {} is outside the vocabulary of {}", cr.prompt_tokens[i], tok.n_vocab()));
    ids = cr.prompt_tokens;
  } else {
    ids = tok.encode(cr.prompt, tok.add_bos(), /*parse_special=*/true);
  }
  const char* field = cr.endpoint == Endpoint::chat ? "messages" : "prompt";
  if (ids.empty()) throw RequestError(field, "the prompt is empty");
  if (int64_t(ids.size()) >= m.ctx)
    throw RequestError(field, fmt::format("the prompt has {} tokens; the context is {} tokens per sequence (-c), which "
                                          "must leave room for at least one generated token",
                                          ids.size(), m.ctx));
  return ids;
}

// Writes to the client; a failed write means it has gone, and its request is cancelled.
bool write_or_cancel(httplib::DataSink& sink, const std::string& s, RequestState& st) {
  if (sink.write(s.data(), s.size())) return true;
  st.cancel();
  return false;
}

// Streams one request's output as server-sent events.
class SseStream {
 public:
  SseStream(std::shared_ptr<RequestState> st, Endpoint e, std::string model, bool include_usage, bool logprobs)
      : st_(std::move(st)), e_(e), model_(std::move(model)), include_usage_(include_usage), logprobs_(logprobs),
        id_(random_id(e == Endpoint::chat ? "chatcmpl-" : "cmpl-")), created_(unix_now()),
        last_write_(std::chrono::steady_clock::now()) {}

  // One call of httplib's chunked content provider: false ends the connection.
  bool next(httplib::DataSink& sink) {
    if (!started_ && e_ == Endpoint::chat) {
      started_ = true;
      if (!write(sink, sse_event(chat_chunk(id_, created_, model_, "assistant", "", std::nullopt, nullptr, include_usage_))))
        return false;
    }
    GenerationOutput out = st_->take(kPoll);
    if (!out.text.empty() || !out.logprobs.empty()) {
      const auto* lp = logprobs_ ? &out.logprobs : nullptr;
      const json chunk = e_ == Endpoint::chat
                             ? chat_chunk(id_, created_, model_, std::nullopt, out.text, std::nullopt, lp, include_usage_)
                             : completion_chunk(id_, created_, model_, out.text, std::nullopt, lp, include_usage_, sent_bytes_);
      sent_bytes_ += int64_t(out.text.size());
      if (!write(sink, sse_event(chunk))) return false;
    }
    if (out.finished) {
      if (!out.error.empty()) {
        write(sink, sse_event(error_json(out.error, "server_error", "")));
      } else {
        const json last = e_ == Endpoint::chat
                              ? chat_chunk(id_, created_, model_, std::nullopt, std::nullopt, out.finish_reason, nullptr, include_usage_)
                              : completion_chunk(id_, created_, model_, "", out.finish_reason, nullptr, include_usage_, sent_bytes_);
        if (!write(sink, sse_event(last))) return false;
        if (include_usage_ && !write(sink, sse_event(usage_chunk(e_, id_, created_, model_, out.usage)))) return false;
      }
      finished_ = true;
      if (!write(sink, std::string(kSseDone))) return false;
      sink.done();
      return true;
    }
    // Nothing new for a while (queued, or a long prefill): a comment line, which also finds
    // a client that has gone.
    if (std::chrono::steady_clock::now() - last_write_ > kKeepAlive && !write(sink, ": waiting\n\n")) return false;
    return true;
  }

  // The connection is over: a stream that did not finish was cut by the client.
  void release() {
    if (!finished_) st_->cancel();
  }

 private:
  bool write(httplib::DataSink& sink, const std::string& s) {
    if (!write_or_cancel(sink, s, *st_)) return false;
    last_write_ = std::chrono::steady_clock::now();
    return true;
  }

  std::shared_ptr<RequestState> st_;
  Endpoint e_;
  std::string model_;
  bool include_usage_, logprobs_;
  std::string id_;
  int64_t created_;
  int64_t sent_bytes_ = 0;
  bool started_ = false, finished_ = false;
  std::chrono::steady_clock::time_point last_write_;
};

// A non-streaming request's answer, gathered as the engine produces it.
class WholeReply {
 public:
  WholeReply(std::shared_ptr<RequestState> st, Endpoint e, std::string model, bool logprobs)
      : st_(std::move(st)), e_(e), model_(std::move(model)), logprobs_(logprobs) {}

  // Gathers output for up to `d`; true when the request has finished.
  bool wait(std::chrono::steady_clock::duration d) {
    const auto end = std::chrono::steady_clock::now() + d;
    while (!finished_ && std::chrono::steady_clock::now() < end) gather();
    return finished_;
  }
  const std::string& error() const { return out_.error; }
  json body() const {
    const std::string id = random_id(e_ == Endpoint::chat ? "chatcmpl-" : "cmpl-");
    const auto* lp = logprobs_ ? &lps_ : nullptr;
    return e_ == Endpoint::chat ? chat_response(id, unix_now(), model_, text_, out_.finish_reason, out_.usage, lp)
                                : completion_response(id, unix_now(), model_, text_, out_.finish_reason, out_.usage, lp);
  }

  // One call of httplib's chunked content provider: false ends the connection. An error
  // after the 200 went out arrives as the body {"error": ...}.
  bool next(httplib::DataSink& sink) {
    gather();
    if (!finished_) return write(sink, " ");
    const std::string s = out_.error.empty() ? body().dump() : error_json(out_.error, "server_error", "").dump();
    if (!write(sink, s)) return false;
    done_ = true;
    sink.done();
    return true;
  }
  // The connection is over: unfinished means the client left.
  void release() {
    if (!done_) st_->cancel();
  }

 private:
  void gather() {
    GenerationOutput o = st_->take(kPoll);
    text_ += o.text;
    lps_.insert(lps_.end(), o.logprobs.begin(), o.logprobs.end());
    if (o.finished) finished_ = true, out_ = std::move(o);
  }
  bool write(httplib::DataSink& sink, const std::string& s) { return write_or_cancel(sink, s, *st_); }

  std::shared_ptr<RequestState> st_;
  Endpoint e_;
  std::string model_;
  bool logprobs_;
  std::string text_;
  std::vector<TokenLogprob> lps_;
  GenerationOutput out_;
  bool finished_ = false, done_ = false;
};

}  // namespace

bool keys_equal(std::string_view expected, std::string_view given) {
  unsigned diff = expected.size() == given.size() ? 0u : 1u;
  for (size_t i = 0; i < expected.size(); ++i)
    diff |= unsigned(uint8_t(expected[i]) ^ uint8_t(i < given.size() ? given[i] : 0));
  return diff == 0;
}

HttpServer::HttpServer(ServerConfig config, Metrics& metrics)
    : config_(std::move(config)),
      metrics_(metrics),
      svr_(std::make_unique<DeadlineServer>(std::chrono::seconds(config_.request_timeout_s),
                                            std::max(config_.max_connections, 4), std::max(config_.max_overflow, 0))) {
  svr_->set_payload_max_length(config_.max_body_bytes);
  // A connection waits in the reception (deadline_server.h): idle for at most read_timeout_s
  // between requests, and a request begun is over after read_timeout_s without a new byte
  // (the stall timeout, httplib's read timeout) or request_timeout_s after its first byte.
  svr_->set_keep_alive_timeout(config_.read_timeout_s);
  svr_->set_read_timeout(config_.read_timeout_s, 0);
  svr_->set_write_timeout(30);
  // httplib's options, and the listening socket kept: bind() raises its backlog.
  svr_->set_socket_options([this](int sock) {
    httplib::default_socket_options(sock);
    listen_fd_ = sock;
  });
  routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  const int port = config_.port == 0 ? svr_->bind_to_any_port(config_.host)
                                     : (svr_->bind_to_port(config_.host, config_.port) ? config_.port : -1);
  if (port < 0) fail("cannot listen on {}:{} (in use, or not an address of this machine)", config_.host, config_.port);
  // httplib listens with a backlog of 5: a burst of connections (or a moment without the
  // accepting thread) drops SYNs, and each dropped client waits a second to retry.
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  return port;
}

void HttpServer::listen() { svr_->listen_after_bind(); }

void HttpServer::stop() {
  if (svr_ && svr_->is_running()) svr_->stop();
}

void HttpServer::set_model(ServedModel m) {
  model_ = m;
  ready_.store(true);
}

void HttpServer::routes() {
  httplib::Server& s = *svr_;
  s.set_logger([this](const httplib::Request&, const httplib::Response& res) { metrics_.count_request(res.status); });
  // Every error leaves as JSON: routes that set no body (404, 413 from httplib) get one here.
  const int request_timeout_s = config_.request_timeout_s, read_timeout_s = config_.read_timeout_s;
  s.set_error_handler(httplib::Server::HandlerWithResponse([request_timeout_s, read_timeout_s](const httplib::Request& req,
                                                                               httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (DeadlineServer::request_timed_out()) {
      // The headers or the body came too slowly; the connection is closed after this answer.
      res.status = 408;
      res.set_header("Connection", "close");
      reply_error(res, 408,
                  fmt::format("the request stalled for {} s (--read-timeout) or did not arrive within {} s "
                              "(--request-timeout)", read_timeout_s, request_timeout_s),
                  status_type(408));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (res.status == 400 && req.has_header("Content-Length") &&
        req.body.size() < size_t(std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10))) {
      // The body ended early or stalled past the read timeout.
      reply_error(res, 400, "the request body ended before its Content-Length, or stalled", status_type(400));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (res.status == 400 && !req.method.empty()) {
      // httplib's parser read the request line but gave up on a header: in practice one
      // line over its 8 KiB limit (a malformed line lands here too).
      res.status = 431;
      reply_error(res, 431, "a request header line is over 8 KiB, or malformed", status_type(431));
      return httplib::Server::HandlerResponse::Handled;
    }
    const std::string msg = res.status == 404   ? "no such route"
                            : res.status == 413 ? "the request body is too large"
                                                : fmt::format("HTTP {}", res.status);
    reply_error(res, res.status, msg, status_type(res.status));
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    reply_error(res, 500, what, "server_error");
  });
  // The header block's size before anything else (a header line over 8 KiB never gets here:
  // httplib's parser refuses it, see the error handler). The connection closes after the
  // answer: a request refused here has not had its body read.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (DeadlineServer::overloaded()) {  // accepted over --max-connections
      reply_error(res, 503, fmt::format("the server is serving {} connections, its limit; retry shortly",
                                        config_.max_connections), status_type(503));
      res.set_header("Retry-After", "1");
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    size_t header_bytes = 0;
    for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;
    if (header_bytes <= config_.max_header_bytes) return httplib::Server::HandlerResponse::Unhandled;
    reply_error(res, 431, fmt::format("the request headers hold {} bytes; the limit is {}", header_bytes,
                                      config_.max_header_bytes), status_type(431));
    res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Authorization and readiness, in each route but /health: inside the handler, so that a
  // POST's body has been read whatever the answer (a refused request's unread body would
  // otherwise be parsed as the next request on a kept-alive connection).
  auto admitted = [this](const httplib::Request& req, httplib::Response& res, bool needs_model) {
    if (!config_.api_key.empty()) {
      const std::string auth = req.get_header_value("Authorization");
      const std::string_view bearer = "Bearer ";
      if (!(auth.starts_with(bearer) && keys_equal(config_.api_key, std::string_view(auth).substr(bearer.size())))) {
        reply_error(res, 401, "missing or wrong API key (Authorization: Bearer <key>)", "authentication_error");
        return false;
      }
    }
    if (needs_model && !ready_.load()) {
      reply_error(res, 503, "the model is loading", "unavailable");
      return false;
    }
    return true;
  };
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (ready_.load()) {
      reply_json(res, 200, json{{"status", "ok"}});
    } else {
      reply_json(res, 503, json{{"status", "loading"}});
    }
  });
  s.Get("/metrics", [this, admitted](const httplib::Request& req, httplib::Response& res) {
    if (admitted(req, res, false)) res.set_content(metrics_.render(), "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [this, admitted](const httplib::Request& req, httplib::Response& res) {
    if (admitted(req, res, true)) reply_json(res, 200, models_json(config_.model_name, unix_now()));
  });
  // What a router asks a worker before routing to it (sglang-router's /model_info and
  // /server_info): the served name stands for the model path (no file paths leave).
  s.Get("/model_info", [this, admitted](const httplib::Request& req, httplib::Response& res) {
    if (admitted(req, res, true))
      reply_json(res, 200, json{{"model_path", config_.model_name}, {"tokenizer_path", config_.model_name},
                                {"served_model_name", config_.model_name}, {"is_generation", true}});
  });
  s.Get("/server_info", [this, admitted](const httplib::Request& req, httplib::Response& res) {
    if (admitted(req, res, true))
      reply_json(res, 200, json{{"model_path", config_.model_name}, {"served_model_name", config_.model_name},
                                {"context_length", model_.ctx}, {"tp_size", 1}, {"dp_size", 1}, {"engine", "oscar"}});
  });
  auto completion = [this, admitted](Endpoint e) {
    return [this, e, admitted](const httplib::Request& req, httplib::Response& res) {
      if (!admitted(req, res, true)) return;
      const RequestLimits limits{model_.ctx};
      CompletionRequest cr;
      GenerationInput in;
      try {
        cr = parse_request_text(e, req.body, limits);
        in.prompt = prompt_tokens(cr, model_);
      } catch (const RequestError& err) {
        reply_json(res, err.status, error_json(err));
        return;
      }
      const int64_t room = model_.ctx - int64_t(in.prompt.size());
      in.max_new_tokens = std::min(cr.max_tokens.value_or(room), room);
      in.sampling = cr.sampling;
      in.stop = cr.stop;
      in.logprobs = cr.logprobs;
      in.top_logprobs = cr.top_logprobs;
      auto st = std::make_shared<RequestState>(std::move(in));
      if (!model_.scheduler->submit(st)) {
        reply_error(res, 503, "the server is shutting down", "unavailable");
        return;
      }
      const std::string model_name = config_.model_name;
      if (cr.stream) {
        auto stream = std::make_shared<SseStream>(st, e, model_name, cr.include_usage, cr.logprobs);
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream", [stream](size_t, httplib::DataSink& sink) { return stream->next(sink); },
            [stream](bool) { stream->release(); });
        return;
      }
      // Non-streaming: the whole answer at once if it is ready within kFirstByteDelay (then
      // an error can still be a 500); otherwise chunked, a space every poll until the JSON.
      auto reply = std::make_shared<WholeReply>(st, e, model_name, cr.logprobs);
      if (reply->wait(kFirstByteDelay)) {
        if (!reply->error().empty()) return reply_error(res, 500, reply->error(), "server_error");
        return reply_json(res, 200, reply->body());
      }
      res.set_chunked_content_provider(
          "application/json", [reply](size_t, httplib::DataSink& sink) { return reply->next(sink); },
          [reply](bool) { reply->release(); });
    };
  };
  s.Post("/v1/chat/completions", completion(Endpoint::chat));
  s.Post("/v1/completions", completion(Endpoint::completion));
}

}  // namespace oscar::serve
