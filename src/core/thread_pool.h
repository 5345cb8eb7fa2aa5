#pragma once
// A fixed set of worker threads created once. parallel_for(n, fn) covers
// [0, n) with calls fn(begin, end, worker), the calling thread being worker 0,
// and returns when every call is done. Each thread starts on its own
// contiguous share (a thread's share is as large as any other's, within one
// grain); with Balance::Steal it takes that share in halving pieces and, once
// done, takes pieces off the far end of another thread's remainder, so a
// thread that runs slower (a busier core, a colder cache) does not hold the
// rest back. With Balance::Static each thread makes exactly one call, on its
// share. Workers spin briefly between jobs (decode issues hundreds of small
// jobs per token), then sleep. Not re-entrant: one parallel_for at a time,
// from one thread. An exception thrown by fn on any thread is rethrown by
// parallel_for once every call has returned (the first one, if several threw).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tally {

class ThreadPool {
 public:
  using RangeFn = std::function<void(int64_t begin, int64_t end, int worker)>;
  enum class Balance { Steal, Static };

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Every range passed to fn starts at a multiple of `grain` items and, but
  // for the last one, ends at one.
  void parallel_for(int64_t n, const RangeFn& fn, int64_t grain = 1, Balance balance = Balance::Steal);

  static int default_threads();

 private:
  // A thread's remaining share, in grains: [front, back) packed in one word
  // so that the owner (taking from the front) and a thief (taking from the
  // back) agree by one compare-and-swap.
  struct alignas(64) Share {
    std::atomic<uint64_t> span{0};
  };

  void worker_loop(int worker);
  void run(int worker);
  void call(int64_t c0, int64_t c1, int worker);
  // Worker w's share of the job's grains: [c0, c1).
  void share(int w, int64_t& c0, int64_t& c1) const {
    c0 = chunks_ * w / n_threads_;
    c1 = chunks_ * (w + 1) / n_threads_;
  }

  int n_threads_;
  std::vector<std::thread> threads_;
  std::unique_ptr<Share[]> shares_;
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1, chunks_ = 0;  // chunks_: the job's grains
  Balance balance_ = Balance::Steal;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr error_;  // the first exception of this parallel_for (guarded by mu_)
};

}  // namespace tally
