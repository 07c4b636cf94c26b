// The threads that serve requests (deadline_server.h): a request that has arrived gets a
// thread at once, started as needed up to max_workers (idle ones end after a while; past
// max_workers a job waits for the first to free up). Connections wait for their requests
// in the reception, not here, so the threads follow the requests being served.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

namespace oscar::serve {

class ConnectionPool final {
 public:
  explicit ConnectionPool(int max_workers);
  ~ConnectionPool();

  void enqueue(std::function<void()> fn);
  // Runs what is queued, then waits for every thread to end; later jobs run on a thread of
  // their own.
  void shutdown();

 private:
  void work(std::function<void()> fn);
  std::mutex m_;
  std::condition_variable jobs_cv_, done_cv_;
  std::deque<std::function<void()>> jobs_;
  int max_workers_;
  int workers_ = 0, idle_ = 0;
  bool stop_ = false;
};

}  // namespace oscar::serve
