#include "output.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace tally::cli {

void flush_stdout() {
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    const int e = errno;
    fail("cannot write the output to stdout: {}", e != 0 ? std::strerror(e) : "write error");
  }
}

void print_json(const nlohmann::json& j, int indent) {
  fmt::print("{}\n", j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace));
  flush_stdout();
}

}  // namespace tally::cli
