#pragma once
// A one-line progress display for long commands, on stderr: how far, time
// elapsed and time left, then what runs:
//   tally bench:  25%, 30s elapsed, ~1m30s left | pp512, 2 threads, depth 0: rep 1/3
//
// Invariants:
// - It writes only when its stream is a terminal (isatty at construction), or
//   when a test forces it on; otherwise every call is a no-op, so redirected
//   and piped output (JSON, logs, CI) is byte for byte what it would be
//   without it.
// - The line is redrawn in place ('\r', then erase to the end of the line)
//   and cut to the terminal's width, so it never wraps; clear() and the
//   destructor erase it and leave the cursor at column 0, so the next line
//   printed on stdout or stderr starts clean.
// - Time left is the elapsed time extrapolated by the share done:
//   elapsed * (total - done) / done. It is unknown (not shown) until some
//   work is done, and 0 once done >= total.
// - Nothing is drawn during the first half second (by default), so short work
//   never flashes a line; after that, at most 10 redraws per second.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace tally {

class Progress {
 public:
  // title: the command ("tally bench"); drawn only when `out` is a terminal.
  explicit Progress(std::string title, std::FILE* out = stderr);
  // enabled: draw whether or not `out` is a terminal (tests); delay_s: no drawing before.
  Progress(std::string title, std::FILE* out, bool enabled, double delay_s = 0.5);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `what` runs now; done of total units of work are finished (any unit: the
  // caller picks one whose count grows roughly with time).
  void update(std::string_view what, double done, double total);
  // Erases the line (before printing a result; the next update redraws it).
  void clear();
  bool enabled() const { return enabled_; }

  // The pieces, pure, for tests.
  static std::optional<double> seconds_left(double done, double total, double elapsed_s);
  static std::string format_duration(double seconds);  // "7s", "3m05s", "1h02m"
  static std::string format_line(std::string_view title, std::string_view what, double done, double total,
                                 double elapsed_s);

 private:
  using Clock = std::chrono::steady_clock;
  std::string title_;
  std::FILE* out_;
  bool enabled_;
  std::chrono::duration<double> delay_;
  bool drawn_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_draw_{};
};

}  // namespace tally
