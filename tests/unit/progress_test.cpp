// The progress line's arithmetic and format, and its silence off a terminal.
// Nothing here depends on timing: elapsed times are given, not measured.
#include "bench/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

using namespace tally;

namespace {
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}
}  // namespace

TEST(Progress, TimeLeftExtrapolatesTheElapsedTimeByTheShareDone) {
  EXPECT_DOUBLE_EQ(*Progress::seconds_left(1, 4, 10), 30);     // a quarter in 10 s: 30 s to go
  EXPECT_DOUBLE_EQ(*Progress::seconds_left(3, 4, 30), 10);
  EXPECT_DOUBLE_EQ(*Progress::seconds_left(50, 200, 2.5), 7.5);
  EXPECT_DOUBLE_EQ(*Progress::seconds_left(4, 4, 30), 0);      // done
  EXPECT_DOUBLE_EQ(*Progress::seconds_left(5, 4, 30), 0);      // past the end: still 0, never negative
  EXPECT_FALSE(Progress::seconds_left(0, 4, 10).has_value());  // nothing done yet: unknown
  EXPECT_FALSE(Progress::seconds_left(1, 4, 0).has_value());
}

TEST(Progress, DurationsReadAsSecondsMinutesHours) {
  EXPECT_EQ(Progress::format_duration(0), "0s");
  EXPECT_EQ(Progress::format_duration(7.4), "7s");
  EXPECT_EQ(Progress::format_duration(59.4), "59s");
  EXPECT_EQ(Progress::format_duration(65), "1m05s");
  EXPECT_EQ(Progress::format_duration(3599), "59m59s");
  EXPECT_EQ(Progress::format_duration(3720), "1h02m");
  EXPECT_EQ(Progress::format_duration(-3), "0s");
}

TEST(Progress, LineSaysWhatRunsHowFarAndTimeLeft) {
  EXPECT_EQ(Progress::format_line("tally bench", "pp512, 2 threads, depth 0: rep 1/3", 6, 24, 30),
            "tally bench:  25%, 30s elapsed, ~1m30s left | pp512, 2 threads, depth 0: rep 1/3");
  EXPECT_EQ(Progress::format_line("t", "x", 0, 10, 2), "t:   0%, 2s elapsed | x");  // no estimate yet
  EXPECT_EQ(Progress::format_line("t", "x", 10, 10, 2), "t: 100%, 2s elapsed, ~0s left | x");
}

TEST(Progress, QuietWhenNotATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("tally bench", f);  // a file is not a terminal
    EXPECT_FALSE(p.enabled());
    p.update("work", 1, 2);
    p.clear();
  }
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}

TEST(Progress, DrawsInPlaceAndErasesWhenForcedOn) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("t", f, true, 0);
    p.update("x", 0, 4);
  }  // the destructor erases the line
  const std::string s = contents(f);
  EXPECT_EQ(s.rfind("\r\033[Kt:   0%, 0s elapsed | x", 0), 0u) << s;
  EXPECT_EQ(s.substr(s.size() - 4), "\r\033[K");
  EXPECT_EQ(s.find('\n'), std::string::npos);
  std::fclose(f);
}

TEST(Progress, DrawsNothingBeforeItsDelay) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("t", f, true, 3600);
    p.update("x", 1, 2);
  }
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}
