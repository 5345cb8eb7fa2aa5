#pragma once
// What every fuzz target asserts about errors: a property that fails aborts
// with its name (libFuzzer keeps the input), and an error's message is one
// line of at most 1 KiB, never a dump of the input.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace tally_fuzz {

[[noreturn]] inline void violated(const char* target, const char* what, const std::string& detail) {
  std::fprintf(stderr, "%s: property violated: %s: %.1000s\n", target, what, detail.c_str());
  std::abort();
}

inline void check_message(const char* target, const tally::Error& e) {
  const std::string msg = e.what();
  if (msg.size() > 1024) violated(target, "message longer than 1 KiB", msg);
  for (char c : msg)
    if (static_cast<unsigned char>(c) < 0x20) violated(target, "control character in the message", msg);
}

}  // namespace tally_fuzz
