#pragma once
// One HTTP/1.1 request read from the bytes a connection receives, in
// whatever pieces they come: Boost.Beast's parser (the framing: request
// line, header fields, Content-Length and chunked bodies) under the server's
// limits, plus the checks Beast leaves to the application. Bytes past the end
// of the request (a pipelined next one) are kept for the next reader.
//
// What is refused, with the status to answer:
//   431  a head (request line and fields) over max_header_bytes
//   413  a Content-Length, a chunk size, or a body over max_body_bytes (a
//        chunked body counts as it arrives, so it is refused without being
//        buffered whole)
//   400  malformed framing: a bad request line or field, a field value with
//        NUL or another control byte, a Content-Length that is not a
//        decimal number, two Content-Length fields, Transfer-Encoding other
//        than "chunked" or beside a Content-Length, a malformed chunk, a
//        chunk header over 4 KiB (its line; for the last chunk, its line
//        and trailer fields), a target that is not a path
// What is read, and what is refused with which status, does not depend on
// how the bytes are cut into pieces (an error may only show once more of
// them are in).
// Invariant: state() moves Reading (the head) -> HaveHead -> Reading (the
// body) -> Done, or to Error from any of those, and stays at Done or Error.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "server/http.h"

namespace tally::server {

struct HttpLimits {
  uint64_t max_body_bytes = 4u << 20;
  uint32_t max_header_bytes = 16u << 10;
};

class RequestReader {
 public:
  enum class State { Reading, HaveHead, Done, Error };

  // `carried`: bytes left over from the connection's previous request.
  RequestReader(const HttpLimits& limits, std::string carried = {});
  ~RequestReader();
  RequestReader(const RequestReader&) = delete;
  RequestReader& operator=(const RequestReader&) = delete;

  // Takes received bytes and parses as far as they go. Once the head is
  // complete it stops (HaveHead) until continue_body(), so the caller can
  // answer before reading a body (401, 404, 405, Expect: 100-continue).
  State feed(std::string_view bytes);
  // Goes on into the body (with the bytes already held); call at HaveHead.
  State continue_body();
  State state() const { return state_; }
  // True when any byte of this request has arrived (for the idle timeout).
  bool started() const { return started_; }
  // At HaveHead and Done: the request (its body only at Done).
  const HttpRequest& request() const { return req_; }
  HttpRequest take_request() { return std::move(req_); }
  // True when the head announces a body (Content-Length > 0 or chunked).
  bool expects_body() const;
  // At Error: the status to answer and why.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_; }
  // At Done: the bytes received past this request.
  std::string leftover() { return std::move(buffer_); }

 private:
  struct Beast;
  void new_parser();  // beast_ = a parser with the limits, before any byte
  State parse();
  State fail(int status, std::string why);
  void take_head();

  HttpLimits limits_;
  std::unique_ptr<Beast> beast_;
  std::string buffer_;  // received and not yet consumed by the parser (all of the head until it is whole)
  State state_ = State::Reading;
  bool started_ = false;
  HttpRequest req_;
  int error_status_ = 0;
  std::string error_;
};

}  // namespace tally::server
