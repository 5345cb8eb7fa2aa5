#include "bench/progress.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace tally {
namespace {

int terminal_width(std::FILE* out) {
  winsize w{};
  if (ioctl(fileno(out), TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  return 80;
}

}  // namespace

Progress::Progress(std::string title, std::FILE* out) : Progress(std::move(title), out, isatty(fileno(out)) != 0) {}

Progress::Progress(std::string title, std::FILE* out, bool enabled, double delay_s)
    : title_(std::move(title)), out_(out), enabled_(enabled), delay_(delay_s) {}

Progress::~Progress() { clear(); }

std::optional<double> Progress::seconds_left(double done, double total, double elapsed_s) {
  if (done >= total) return 0.0;
  if (done <= 0 || elapsed_s <= 0) return std::nullopt;
  return elapsed_s * (total - done) / done;
}

std::string Progress::format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
}

std::string Progress::format_line(std::string_view title, std::string_view what, double done, double total,
                                  double elapsed_s) {
  const double share = total > 0 ? std::clamp(done / total, 0.0, 1.0) : 0.0;
  // The figures first: a narrow terminal cuts the end of the line, not them.
  std::string line = fmt::format("{}: {:3.0f}%, {} elapsed", title, 100 * share, format_duration(elapsed_s));
  if (const auto left = seconds_left(done, total, elapsed_s)) line += fmt::format(", ~{} left", format_duration(*left));
  return fmt::format("{} | {}", line, what);
}

void Progress::update(std::string_view what, double done, double total) {
  if (!enabled_) return;
  const auto now = Clock::now();
  if (now - start_ < delay_) return;
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  std::string line = format_line(title_, what, done, total, std::chrono::duration<double>(now - start_).count());
  const size_t width = static_cast<size_t>(std::max(10, terminal_width(out_) - 1));
  if (line.size() > width) line.resize(width);
  fmt::print(out_, "\r\033[K{}", line);
  std::fflush(out_);
  drawn_ = true;
  last_draw_ = now;
}

void Progress::clear() {
  if (!enabled_ || !drawn_) return;
  fmt::print(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace tally
