#include "oscar/core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

namespace oscar {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_share(int index) {
  // Static partition: thread `index` of `size()` gets one contiguous range of grains.
  const int64_t n_grains = (job_n_ + job_grain_ - 1) / job_grain_;
  const int64_t per = n_grains / size(), extra = n_grains % size();
  const int64_t g0 = index * per + std::min<int64_t>(index, extra);
  const int64_t g1 = g0 + per + (index < extra ? 1 : 0);
  const int64_t begin = g0 * job_grain_, end = std::min(job_n_, g1 * job_grain_);
  if (begin >= end) return;
  try {
    (*job_)(begin, end);
  } catch (...) {
    std::lock_guard lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
}

namespace {
// How long a thread polls before it sleeps: about what a futex sleep and wake-up cost
// together, so an oversubscribed machine loses little to the spinning. Measured in time,
// not polls: a pause takes ~10 cycles on some x86 cores and ~140 on others.
constexpr auto spin_time = std::chrono::microseconds(100);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Polls done() until it holds or spin_time has passed; returns done().
template <class Done>
bool spin_until(Done done) {
  if (done()) return true;
  const auto deadline = std::chrono::steady_clock::now() + spin_time;
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}
}  // namespace

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
      if (stop_) return;
      seen = generation_.load();
    }
    run_share(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mu_);  // the caller may be asleep on done_cv_
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_grain_ = grain;
    error_ = nullptr;
    pending_ = int(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  run_share(0);
  spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return pending_.load() == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

namespace {
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
}  // namespace

ThreadPool& default_pool() {
  auto& p = pool_slot();
  if (!p) p = std::make_unique<ThreadPool>(0);
  return *p;
}

void set_num_threads(int n) { pool_slot() = std::make_unique<ThreadPool>(n); }

int num_threads() { return default_pool().size(); }

}  // namespace oscar
