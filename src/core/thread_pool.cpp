#include "core/thread_pool.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TALLY_PAUSE() _mm_pause()
#else
#define TALLY_PAUSE() std::this_thread::yield()
#endif

namespace tally {

namespace {
constexpr int kSpinsBeforeYield = 1 << 10;
constexpr int kSpinsBeforeSleep = 1 << 16;
}

int ThreadPool::default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  if (n_threads < 1 || n_threads > 1024) fail("thread count {} is out of range (1 to 1024)", n_threads);
  for (int w = 1; w < n_threads; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
    epoch_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_range(int worker) {
  const int64_t chunks = (n_ + grain_ - 1) / grain_;
  const int64_t c0 = chunks * worker / n_threads_, c1 = chunks * (worker + 1) / n_threads_;
  const int64_t begin = std::min(n_, c0 * grain_), end = std::min(n_, c1 * grain_);
  if (begin >= end) return;
  try {
    (*fn_)(begin, end, worker);
  } catch (...) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t grain) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  fn_ = &fn;
  n_ = n;
  grain_ = std::max<int64_t>(1, grain);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lk(mu_);
    epoch_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  run_range(0);
  // Spin briefly (workers usually finish within microseconds), then yield so a
  // descheduled worker can run on an oversubscribed machine.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinsBeforeYield) TALLY_PAUSE();
    else std::this_thread::yield();
  }
  fn_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::worker_loop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    uint64_t e;
    while ((e = epoch_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpinsBeforeSleep) {
        if (spins < kSpinsBeforeYield) TALLY_PAUSE();
        else std::this_thread::yield();
        continue;
      }
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return epoch_.load(std::memory_order_acquire) != seen; });
    }
    seen = e;
    if (stop_.load()) return;
    run_range(worker);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace tally
