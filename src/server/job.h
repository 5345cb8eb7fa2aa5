#pragma once
// One request's generation, shared by the HTTP thread that answers it and the
// engine thread that computes it. The engine thread appends events (a token
// of a choice, the end of a choice); the HTTP thread takes them in order.
// Invariants: every choice gets exactly one End event, after its last Token;
// done() once every choice ended; cancel() is sticky and may come from any
// thread. Thread-safe.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "server/requests.h"

namespace tally::server {

struct Event {
  enum class Kind { Token, End } kind = Kind::Token;
  int choice = 0;
  std::string text;     // Token: the text it completes (may be empty: an unfinished character, a held-back stop prefix)
  int32_t token = -1;
  double logprob = 0;   // Token: log-probability of the token under the model
  std::vector<std::pair<int32_t, double>> top;  // Token: the top_logprobs alternatives
  std::string finish_reason;  // End: "stop" or "length"
};

class Job {
 public:
  using Clock = std::chrono::steady_clock;

  Job(std::string id, GenerationRequest req) : id_(std::move(id)), req_(std::move(req)), submitted_(Clock::now()) {}

  const std::string& id() const { return id_; }
  const GenerationRequest& request() const { return req_; }

  // Engine side.
  void push(Event e);
  void set_cached_tokens(int64_t n, int64_t from_disk) {
    cached_.store(n);
    disk_.store(from_disk);
  }

  // HTTP side: waits up to `timeout` for the next event; false when none came.
  bool next(Event& e, std::chrono::milliseconds timeout);
  bool done() const;
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  int64_t prompt_tokens() const { return static_cast<int64_t>(req_.prompt.size()); }
  int64_t cached_tokens() const { return cached_.load(); }
  int64_t disk_cached_tokens() const { return disk_.load(); }  // of cached_tokens(), from the disk tier
  int64_t completion_tokens() const { return completion_.load(); }
  Clock::time_point submitted() const { return submitted_; }
  // Milliseconds from submission to the first token (-1 before it).
  double ttft_ms() const;

 private:
  std::string id_;
  GenerationRequest req_;
  Clock::time_point submitted_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  int ended_ = 0;
  Clock::time_point first_token_{};
  bool has_first_ = false;
  std::atomic<bool> cancelled_{false};
  std::atomic<int64_t> cached_{0}, disk_{0}, completion_{0};
};

}  // namespace tally::server
