#include "oscar/serve/connection_pool.h"

#include <chrono>
#include <thread>

namespace oscar::serve {

namespace {
constexpr auto kIdleExit = std::chrono::seconds(30);  // an idle worker's thread ends after this
}  // namespace

ConnectionPool::ConnectionPool(int max_workers) : max_workers_(max_workers < 1 ? 1 : max_workers) {}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::unique_lock lock(m_);
  if (idle_ > static_cast<int>(jobs_.size()) || (workers_ >= max_workers_ && !stop_)) {
    jobs_.push_back(std::move(fn));  // an idle worker takes it (or, at the cap, the first to free up)
    jobs_cv_.notify_one();
    return;
  }
  ++workers_;
  std::thread([this, f = std::move(fn)]() mutable { work(std::move(f)); }).detach();
}

void ConnectionPool::work(std::function<void()> fn) {
  for (;;) {
    fn();
    std::unique_lock lock(m_);
    ++idle_;
    const bool got = jobs_cv_.wait_for(lock, kIdleExit, [this] { return stop_ || !jobs_.empty(); });
    --idle_;
    if (!got || jobs_.empty()) {  // idle too long, or stopping with nothing left
      --workers_;
      done_cv_.notify_all();
      return;
    }
    fn = std::move(jobs_.front());
    jobs_.pop_front();
  }
}

void ConnectionPool::shutdown() {
  std::unique_lock lock(m_);
  stop_ = true;
  jobs_cv_.notify_all();
  // A queued job still gets a thread: each holds a socket that only it closes.
  while (!jobs_.empty() && workers_ == 0) {
    auto f = std::move(jobs_.front());
    jobs_.pop_front();
    ++workers_;
    std::thread([this, f = std::move(f)]() mutable { work(std::move(f)); }).detach();
  }
  done_cv_.wait(lock, [this] { return workers_ == 0; });
}

}  // namespace oscar::serve
