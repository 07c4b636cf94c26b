// The HTTP server's connections, one thread each (cpp-httplib's TaskQueue). httplib's own
// pool has a fixed number of threads and an unbounded queue: 300 clients that send part of
// a request and stall hold every thread until their read timeout, and everyone else waits
// behind them. Here a connection gets a thread at once, started as needed up to
// max_workers (idle ones end after a while); past that, up to max_overflow more run with
// overloaded() true, and the server answers them 503 with Retry-After as soon as their
// headers are in. Only beyond both does a connection wait in the queue.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

#include <httplib.h>

namespace oscar::serve {

class ConnectionPool final : public httplib::TaskQueue {
 public:
  ConnectionPool(int max_workers, int max_overflow);
  ~ConnectionPool() override;

  void enqueue(std::function<void()> fn) override;
  // Runs what is queued, then waits for every connection's thread to end.
  void shutdown() override;

  // Whether the calling thread serves a connection accepted over the cap.
  static bool overloaded();

 private:
  void work(std::function<void()> fn);
  std::mutex m_;
  std::condition_variable jobs_cv_, done_cv_;
  std::deque<std::function<void()>> jobs_;
  int max_workers_, max_overflow_;
  int workers_ = 0, idle_ = 0, overflow_ = 0;
  bool stop_ = false;
};

}  // namespace oscar::serve
