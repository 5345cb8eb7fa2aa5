// ThreadPool::parallel_for: every index is covered exactly once, by ranges
// aligned to the grain, with worker indices in range, and at most one range
// per worker when static; a slow thread's share is taken over by the others;
// long runs of tiny jobs complete; a range's exception reaches the caller;
// bad thread counts are refused.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace tally {
namespace {

using Balance = ThreadPool::Balance;
const std::pair<Balance, int64_t> kCases[] = {{Balance::Steal, 1},  {Balance::Steal, 3},  {Balance::Steal, 16},
                                              {Balance::Static, 1}, {Balance::Static, 3}, {Balance::Static, 16}};

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads = 1; threads <= 4; ++threads) {
    ThreadPool pool(threads);
    ASSERT_EQ(pool.size(), threads);
    for (const auto& [balance, grain] : kCases) {
      for (int64_t n = 0; n <= 200; ++n) {
        std::vector<std::atomic<int>> hits(n);
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> ranges;
        std::vector<int> workers;
        pool.parallel_for(
            n,
            [&](int64_t begin, int64_t end, int worker) {
              for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
              std::lock_guard<std::mutex> lk(mu);
              ranges.emplace_back(begin, end);
              workers.push_back(worker);
            },
            grain, balance);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of n=" << n << " threads=" << threads
                                       << " grain=" << grain << " static=" << (balance == Balance::Static);
        std::set<int> distinct;
        for (size_t r = 0; r < ranges.size(); ++r) {
          const auto [b, e] = ranges[r];
          EXPECT_LT(b, e) << "empty range passed to fn";
          EXPECT_EQ(b % grain, 0) << "range [" << b << ", " << e << ") not aligned to grain " << grain;
          EXPECT_TRUE(e % grain == 0 || e == n) << "range [" << b << ", " << e << ") ends off the grain " << grain;
          EXPECT_GE(workers[r], 0);
          EXPECT_LT(workers[r], pool.size());
          distinct.insert(workers[r]);
        }
        if (balance == Balance::Static) {
          EXPECT_EQ(distinct.size(), ranges.size()) << "a worker ran two ranges (n=" << n << ")";
        }
        if (n == 0) {
          EXPECT_TRUE(ranges.empty());
        }
      }
    }
  }
}

// A thread that runs slowly keeps only part of its share: the caller, done
// with its own half, takes pieces off the far end of the slow one's rest.
// "Slowly" is an event, not a time: worker 1 holds its first item until the
// caller has done more than its own half (which it can only do by taking
// worker 1's items), so the outcome does not depend on how busy the machine is.
TEST(ThreadPool, AFastThreadTakesOverASlowOnesShare) {
  ThreadPool pool(2);
  std::vector<int> owner(64, -1);
  std::mutex m;
  std::condition_variable cv;
  int caller_items = 0;
  bool stuck = false;
  auto job = [&](int64_t b, int64_t e, int worker) {
    for (int64_t i = b; i < e; ++i) {
      owner[i] = worker;
      std::unique_lock<std::mutex> lock(m);
      if (worker == 0) {
        ++caller_items;
        cv.notify_all();
      } else if (caller_items <= 32 && !cv.wait_for(lock, std::chrono::seconds(30), [&] { return caller_items > 32; })) {
        stuck = true;  // the caller never took over: fail below instead of hanging
      }
    }
  };
  pool.parallel_for(64, job);
  EXPECT_FALSE(stuck) << "the caller did not take over the slow thread's share";
  int on_caller = 0;
  for (int w : owner) {
    ASSERT_GE(w, 0);
    on_caller += w == 0;
  }
  EXPECT_GT(on_caller, 32);
  EXPECT_EQ(owner.front(), 0);
  // A static split leaves each thread its half however long it takes.
  std::fill(owner.begin(), owner.end(), -1);
  auto mark = [&](int64_t b, int64_t e, int worker) {
    for (int64_t i = b; i < e; ++i) owner[i] = worker;
  };
  pool.parallel_for(8, mark, 1, Balance::Static);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(owner[i], i < 4 ? 0 : 1) << i;
}

// One parallel_for after another, as decode does hundreds of times per token.
// Two threads: every job still goes through the hand-off to a worker and back,
// and the test stays fast on a machine with few free cores (each job costs a
// reschedule there).
TEST(ThreadPool, LongSequenceOfTinyJobsCompletes) {
  ThreadPool pool(2);
  std::vector<int64_t> per_index(8, 0);  // each index is written by one worker per job
  int64_t calls_on_caller = 0;
  for (int job = 0; job < 10000; ++job)
    pool.parallel_for(
        8,
        [&](int64_t begin, int64_t end, int worker) {
          for (int64_t i = begin; i < end; ++i) ++per_index[i];
          if (worker == 0) ++calls_on_caller;
        },
        1, Balance::Static);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(per_index[i], 10000) << i;
  EXPECT_EQ(calls_on_caller, 10000);  // the calling thread is worker 0 and always gets a range
  for (int job = 0; job < 10000; ++job)
    pool.parallel_for(8, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) ++per_index[i];
    });
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(per_index[i], 20000) << i;
  // A pool that is created, used once and destroyed many times shuts down cleanly.
  for (int i = 0; i < 20; ++i) {
    ThreadPool p(3);
    std::atomic<int> sum{0};
    p.parallel_for(10, [&](int64_t b, int64_t e, int) { sum += static_cast<int>(e - b); });
    ASSERT_EQ(sum.load(), 10);
  }
}

// An exception from any worker's range reaches the caller of parallel_for,
// after every range has returned; the pool then runs the next job as usual.
TEST(ThreadPool, ExceptionsInAnyRangeReachTheCaller) {
  ThreadPool pool(3);
  for (int thrower = 0; thrower < 3; ++thrower) {
    std::atomic<int> finished{0};
    auto job = [&](int64_t, int64_t, int worker) {
      if (worker == thrower) fail("range of worker {} failed", worker);
      ++finished;
    };
    try {
      pool.parallel_for(3, job, 1, Balance::Static);
      ADD_FAILURE() << "no exception from worker " << thrower;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("range of worker " + std::to_string(thrower)), std::string::npos);
    }
    EXPECT_EQ(finished.load(), 2);  // the other ranges ran to the end before the rethrow
    // Shared out: whichever thread runs the failing index, the other pieces run.
    std::atomic<int> done{0};
    try {
      pool.parallel_for(30, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
          if (i == thrower * 10) fail("index {} failed", i);
          ++done;
        }
      });
      ADD_FAILURE() << "no exception from index " << thrower * 10;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("index " + std::to_string(thrower * 10)), std::string::npos);
    }
    EXPECT_GE(done.load(), 25);  // only the failing piece (at most half a 10-item share) stops early
    std::atomic<int> sum{0};
    pool.parallel_for(30, [&](int64_t b, int64_t e, int) { sum += static_cast<int>(e - b); });
    EXPECT_EQ(sum.load(), 30);
  }
}

TEST(ThreadPool, BadThreadCountsAreRefused) {
  EXPECT_THROW(ThreadPool(0), Error);
  EXPECT_THROW(ThreadPool(-3), Error);
  EXPECT_THROW(ThreadPool(1025), Error);
  EXPECT_GE(ThreadPool::default_threads(), 1);
}

}  // namespace
}  // namespace tally
