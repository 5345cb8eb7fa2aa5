#pragma once
// A fixed set of worker threads created once. parallel_for(n, fn) splits
// [0, n) into one contiguous range per thread and runs fn(begin, end, worker)
// with the calling thread as worker 0; it returns when every range is done.
// Workers spin briefly between jobs (decode issues hundreds of small jobs per
// token), then sleep. Not re-entrant: one parallel_for at a time, from one thread.
// An exception thrown by fn on any thread is rethrown by parallel_for once
// every range has returned (the first one, if several threw).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tally {

class ThreadPool {
 public:
  using RangeFn = std::function<void(int64_t begin, int64_t end, int worker)>;

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Ranges are aligned to `grain` items (the last one may be shorter).
  void parallel_for(int64_t n, const RangeFn& fn, int64_t grain = 1);

  static int default_threads();

 private:
  void worker_loop(int worker);
  void run_range(int worker);

  int n_threads_;
  std::vector<std::thread> threads_;
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr error_;  // the first exception of this parallel_for (guarded by mu_)
};

}  // namespace tally
