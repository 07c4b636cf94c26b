// A fixed pool of worker threads with one verb: parallel_for over [0, n).
// The calling thread takes part, so a pool of size 1 runs everything inline.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace oscar {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 0: all hardware threads
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n); chunk boundaries are
  // multiples of `grain`. Returns when all chunks are done; rethrows the first exception.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);
  void run_share(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  // Written under mu_; read without it while a thread spins (100 µs) for the next job or
  // for the others to finish (a decode step makes ~250 small parallel_for calls, and a
  // futex sleep and wake-up each took a third of the step; a spin of 1000 pauses, ~50 µs
  // where a pause is ~140 cycles, still left Qwen2.5's decode 7 % in the scheduler). Job fields are published
  // before generation_ (its increment is a release).
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
  // Current job (valid while pending_ > 0).
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_grain_ = 1;
  std::exception_ptr error_;
};

// The process-wide pool used by the CPU ops (sized once by set_num_threads).
ThreadPool& default_pool();
void set_num_threads(int n);  // n <= 0: all hardware threads
int num_threads();

}  // namespace oscar
