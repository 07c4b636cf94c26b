// cpp-httplib's server with a total deadline for receiving each request. httplib's read
// timeout applies to each read, so a client that sends one byte just inside it, again and
// again, holds its connection and thread for as long as it likes (slowloris); with many
// such clients the cap fills and real ones get 503. Here a request's headers and body must
// arrive within request_timeout of its first byte; past it the read fails, the request is
// answered as httplib answers a failed read (our error handler makes that a 408), and the
// connection is closed. The deadline covers reading only: an answer, however long it
// streams, is not bound by it. Between the requests of a kept-alive connection httplib's
// keep-alive timeout applies, as before.
#pragma once
#include <chrono>

#include <httplib.h>

namespace oscar::serve {

class DeadlineServer final : public httplib::Server {
 public:
  explicit DeadlineServer(std::chrono::milliseconds request_timeout) : request_timeout_(request_timeout) {}

  // Whether the request being served on the calling thread ran past its deadline (for the
  // error handler, which runs on that thread).
  static bool request_timed_out();

 private:
  // httplib calls this on a task queue's thread for each accepted connection.
  bool process_and_close_socket(socket_t sock) override;
  // Whether a request's first byte arrives within the keep-alive timeout (false when the
  // server stops first).
  bool wait_for_request(socket_t sock) const;

  std::chrono::milliseconds request_timeout_;
};

}  // namespace oscar::serve
