// The HTTP server's waiting room: connections that are idle between requests or still
// sending one wait here, all on one thread (epoll), instead of a thread each. A connection
// leaves for a worker only when its request has arrived (the headers, and a body of up to
// kPeekBytes whole), or when it ran out of time (no new byte for the stall timeout, or the
// request not complete within the request timeout of its first byte: the worker then
// answers 408 from the bytes that came). Idle connections are closed after the idle
// timeout. Nothing is read here: bytes are peeked (MSG_PEEK), so the worker's parser sees
// the request from its first byte. Under ASan a thread per stalled connection kept RSS
// growing over a 10-minute soak (docs/reliability.md); here threads follow requests only.
#pragma once
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace oscar::serve {

class Reception {
 public:
  using Clock = std::chrono::steady_clock;

  // What a connection carries from wait to wait.
  struct Visit {
    int fd = -1;
    bool overloaded = false;          // accepted over the connection cap: answered 503
    size_t requests_left = 0;         // on this connection, keep-alive included
    Clock::time_point first_byte{};   // of the request now arriving (set here)
    bool timed_out = false;           // left because time ran out, not because it arrived
  };

  struct Timeouts {
    std::chrono::milliseconds idle;     // no request begun (a new or kept-alive connection)
    std::chrono::milliseconds stall;    // no new byte of a request begun
    std::chrono::milliseconds request;  // from a request's first byte to its last
  };

  // ready(visit) runs on the reception's thread and must not block (it hands the visit to
  // a worker); a closed connection is reported to closed(), also on that thread.
  Reception(Timeouts timeouts, std::function<void(Visit)> ready, std::function<void()> closed);
  ~Reception();
  Reception(const Reception&) = delete;
  Reception& operator=(const Reception&) = delete;

  // A connection to wait on (a new one, or one kept alive after its answer). After stop()
  // the connection is closed at once.
  void add(Visit v);
  // Closes every waiting connection and ends the thread.
  void stop();
  size_t waiting() const;

  // Bytes peeked to judge whether a request is whole; a larger one leaves at its headers.
  static constexpr size_t kPeekBytes = 64 * 1024;

  // Whether `bytes` (the start of a connection's stream) hold a whole request: headers and
  // Content-Length bytes of body. Chunked bodies, bodies over kPeekBytes and header blocks
  // that fill kPeekBytes count as whole (the worker reads on, or refuses them).
  static bool request_complete(const char* bytes, size_t n);

 private:
  struct Waiting {
    Visit visit;
    Clock::time_point since, last_byte;
    size_t seen = 0;  // bytes peeked so far
  };
  void run();
  void on_readable(int fd);
  void expire(Clock::time_point now);
  void leave(int fd, bool timed_out);
  void close_waiting(int fd);

  Timeouts timeouts_;
  std::function<void(Visit)> ready_;
  std::function<void()> closed_;
  int epoll_fd_ = -1, wake_fd_ = -1;
  mutable std::mutex m_;
  std::vector<Visit> incoming_;  // added by other threads, taken in by run()
  bool stopping_ = false;
  std::unordered_map<int, Waiting> waiting_;  // run()'s own
  size_t n_waiting_ = 0;                      // waiting_.size(), for other threads
  std::vector<char> peek_;
  std::thread thread_;
};

}  // namespace oscar::serve
