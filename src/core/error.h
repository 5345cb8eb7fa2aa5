#pragma once
// tally::Error is the one exception type the engine throws for bad input or
// unsatisfiable requests. Its message is complete: it names what was wrong
// and where (file, byte offset, field, tensor, flag), so callers print it as is.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tally {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tally
