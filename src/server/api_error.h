#pragma once
// An error answered to an HTTP client in OpenAI's shape:
//   {"error": {"message", "type", "param", "code"}} with an HTTP status.
// Thrown by request parsing and admission; the server turns it into a response.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tally::server {

struct ApiError : std::runtime_error {
  int status;
  std::string type;   // "invalid_request_error", "authentication_error", "rate_limit_error", "server_error"
  std::string param;  // the request field at fault, "" if none
  std::string code;   // a short machine-readable code, "" if none
  int retry_after = 0;  // seconds, for 429/503

  ApiError(int status_, std::string type_, std::string message, std::string param_ = "", std::string code_ = "")
      : std::runtime_error(std::move(message)),
        status(status_),
        type(std::move(type_)),
        param(std::move(param_)),
        code(std::move(code_)) {}
};

// A 400 naming the field.
template <typename... Args>
[[noreturn]] void bad_request(const std::string& param, fmt::format_string<Args...> f, Args&&... args) {
  throw ApiError(400, "invalid_request_error", fmt::format(f, std::forward<Args>(args)...), param);
}

}  // namespace tally::server
