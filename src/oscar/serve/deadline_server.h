// cpp-httplib's server, with connections waiting on one thread and requests served by a
// pool, and a total deadline for receiving each request.
//
// httplib gives each connection a thread for its whole life: idle and half-sent
// connections hold threads (and, under ASan, their per-thread state kept growing through a
// soak). Here accepted and kept-alive connections wait in a Reception (reception.h, one
// epoll thread) until a request has arrived, and only then take a worker thread
// (ConnectionPool) to be parsed, answered and, if kept alive, handed back.
//
// httplib's read timeout applies to each read, so a client that sends one byte just inside
// it, again and again, would hold its connection for as long as it likes (slowloris). Here
// a request's headers and body must arrive within request_timeout of its first byte, and a
// request that gets no new byte for the stall timeout (httplib's read timeout) is over
// too; it is then answered as httplib answers a failed read (the error handler makes that
// a 408) and the connection is closed. The deadline covers receiving only: an answer,
// however long it streams, is not bound by it. Between the requests of a kept-alive
// connection httplib's keep-alive timeout applies. Connections past max_connections are
// served with overloaded() true (the server answers them 503), and past max_connections +
// max_overflow closed at once.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>

#include <httplib.h>

#include "oscar/serve/connection_pool.h"
#include "oscar/serve/reception.h"

namespace oscar::serve {

class DeadlineServer final : public httplib::Server {
 public:
  explicit DeadlineServer(std::chrono::milliseconds request_timeout, int max_connections = 1024,
                          int max_overflow = 64);
  ~DeadlineServer() override;

  // Whether the request being served on the calling thread ran past its deadline (for the
  // error handler, which runs on that thread).
  static bool request_timed_out();
  // Whether the connection being served on the calling thread was accepted over the cap.
  static bool overloaded();
  // Connections open now, and those of them waiting in the reception (for tests).
  int open_connections() const { return open_.load(); }
  size_t waiting_connections() const;

 private:
  // httplib calls this for each accepted connection (on its accept thread: the task queue
  // runs it inline); it hands the socket to the reception.
  bool process_and_close_socket(socket_t sock) override;
  // A worker's job: the request that arrived on v.fd (and any pipelined after it).
  void serve(Reception::Visit v);
  void close_connection(int fd);
  Reception& reception();
  // Closes the waiting connections and waits for the requests being served (when the
  // server stops, and at destruction).
  void drain();

  std::chrono::milliseconds request_timeout_;
  int max_connections_, max_overflow_;
  std::atomic<int> open_{0};
  std::unique_ptr<ConnectionPool> workers_;
  std::unique_ptr<Reception> reception_;  // made at the first connection: the timeouts are set by then
  mutable std::mutex reception_m_;
};

}  // namespace oscar::serve
