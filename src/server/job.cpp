#include "server/job.h"

namespace tally::server {

void Job::push(Event e) {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (e.kind == Event::Kind::Token) {
      if (e.token >= 0) ++completion_;  // held text flushed at the end is no token
      if (!has_first_) {
        has_first_ = true;
        first_token_ = Clock::now();
      }
    } else {
      ++ended_;
    }
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

bool Job::next(Event& e, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(m_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  e = std::move(events_.front());
  events_.pop_front();
  return true;
}

bool Job::done() const {
  std::lock_guard<std::mutex> lock(m_);
  return ended_ == req_.n && events_.empty();
}

double Job::ttft_ms() const {
  std::lock_guard<std::mutex> lock(m_);
  return has_first_ ? std::chrono::duration<double, std::milli>(first_token_ - submitted_).count() : -1;
}

}  // namespace tally::server
