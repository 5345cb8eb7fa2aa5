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
  shares_ = std::make_unique<Share[]>(static_cast<size_t>(n_threads));
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

namespace {
constexpr uint64_t pack(uint64_t front, uint64_t back) { return front | back << 32; }

// Takes half of what is left of a share (rounded up), from its front (the
// owner, which then keeps working where it was) or its back (a thief, which
// leaves the owner's next pieces in place). False once the share is empty.
bool claim(std::atomic<uint64_t>& span, bool from_back, int64_t& c0, int64_t& c1) {
  uint64_t s = span.load(std::memory_order_acquire), f, b, take;
  do {
    f = s & 0xffffffffu, b = s >> 32;
    if (f >= b) return false;
    take = (b - f + 1) / 2;
  } while (!span.compare_exchange_weak(s, from_back ? pack(f, b - take) : pack(f + take, b), std::memory_order_acq_rel,
                                       std::memory_order_acquire));
  c0 = static_cast<int64_t>(from_back ? b - take : f);
  c1 = c0 + static_cast<int64_t>(take);
  return true;
}
}  // namespace

void ThreadPool::call(int64_t c0, int64_t c1, int worker) {
  const int64_t begin = std::min(n_, c0 * grain_), end = std::min(n_, c1 * grain_);
  if (begin >= end) return;
  try {
    (*fn_)(begin, end, worker);
  } catch (...) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::run(int worker) {
  int64_t c0 = 0, c1 = 0;
  if (balance_ == Balance::Static) {
    share(worker, c0, c1);
    call(c0, c1, worker);
    return;
  }
  while (claim(shares_[worker].span, false, c0, c1)) call(c0, c1, worker);
  // Shares only shrink, so one pass over the others leaves every one empty.
  for (int k = 1; k < n_threads_; ++k)
    while (claim(shares_[(worker + k) % n_threads_].span, true, c0, c1)) call(c0, c1, worker);
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t grain, Balance balance) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  fn_ = &fn;
  n_ = n;
  grain_ = std::max<int64_t>(1, grain);
  chunks_ = (n_ + grain_ - 1) / grain_;
  // A share's bounds are 32-bit; a job of 2^32 grains or more (none today) runs statically.
  balance_ = chunks_ >> 32 ? Balance::Static : balance;
  if (balance_ == Balance::Steal)
    for (int w = 0; w < n_threads_; ++w) {
      int64_t c0 = 0, c1 = 0;
      share(w, c0, c1);
      shares_[w].span.store(pack(static_cast<uint64_t>(c0), static_cast<uint64_t>(c1)), std::memory_order_relaxed);
    }
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lk(mu_);
    epoch_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  run(0);
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
    run(worker);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace tally
