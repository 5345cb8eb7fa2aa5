// libFuzzer target for the server's request reading and routing
// (server/http_parser.h, server/http.h): bytes as a client would send them on
// one connection, possibly several pipelined requests. The first byte picks
// how the rest is cut into the pieces the reader receives. Properties:
//   - the cut does not change what is accepted: the same requests (method,
//     target, headers, body) as when all bytes come at once, then the same
//     end, except that an error may show only once more bytes are in (the
//     parser checks a partial request line early when it is there whole);
//   - an error is 400, 413 or 431 with a one-line message;
//   - a request's path starts with '/', its header names are lower case, its
//     body is within the limit;
//   - routing answers a handler, or 404 with the "other" route, or 405 with
//     the methods allowed.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_checks.h"
#include "server/http.h"
#include "server/http_parser.h"

namespace {

constexpr const char* kTarget = "fuzz_http";
using tally::server::HttpRequest;
using tally::server::RequestReader;

[[noreturn]] void violated(const char* what, const std::string& detail) {
  tally_fuzz::violated(kTarget, what, detail);
}

const tally::server::Router& router() {
  static const tally::server::Router r = [] {
    tally::server::Router x;
    auto none = [](const HttpRequest&, tally::server::HttpResponse&) {};
    x.add("GET", "/health", none);
    x.add("POST", "/v1/chat/completions", none);
    x.add("POST", "/tokenize", none);
    x.add("GET", "/", none);
    return x;
  }();
  return r;
}

std::string summary(const HttpRequest& r) {
  std::string s = r.method + ' ' + r.target + '\n';
  for (const auto& [k, v] : r.headers) s += k + ':' + v + '\n';
  return s + std::to_string(r.body.size()) + ':' + r.body;
}

void check_request(const HttpRequest& r, const tally::server::HttpLimits& limits) {
  if (r.path.empty() || r.path[0] != '/') violated("path does not start with '/'", r.path);
  if (r.target.compare(0, r.path.size(), r.path) != 0) violated("path is not the target's start", r.target);
  for (const auto& [k, v] : r.headers)
    for (char c : k)
      if (c >= 'A' && c <= 'Z') violated("header name not lower case", k);
  if (r.body.size() > limits.max_body_bytes) violated("body over the limit", std::to_string(r.body.size()));
  const auto m = router().match(r.method, r.path);
  if (m.handler == nullptr && m.status != 404 && m.status != 405) violated("unrouted without 404/405", m.route);
  if (m.status == 404 && m.route != "other") violated("404 route is not 'other'", m.route);
  if (m.status == 405 && m.allow.empty()) violated("405 without Allow", r.path);
  if (m.handler != nullptr && m.route != r.path) violated("route is not the path", m.route);
}

struct Outcome {
  std::string requests;  // one summary per request read
  std::string end;       // "end", "incomplete", "limit" or "error STATUS message"
};

// Reads every request of `bytes`, given to readers in pieces of `cuts` bytes
// (cycled; 0: all at once).
Outcome read_all(std::string_view bytes, const std::vector<size_t>& cuts) {
  tally::server::HttpLimits limits;
  limits.max_body_bytes = 2048;
  limits.max_header_bytes = 1024;
  Outcome out;
  std::string carried;
  size_t pos = 0, cut = 0;
  auto next_piece = [&]() {
    size_t n = cuts.empty() || cuts[cut % cuts.size()] == 0 ? bytes.size() - pos : cuts[cut % cuts.size()];
    ++cut;
    n = std::min(n, bytes.size() - pos);
    std::string_view p = bytes.substr(pos, n);
    pos += n;
    return p;
  };
  for (int requests = 0; requests < 64; ++requests) {
    RequestReader reader(limits, std::move(carried));
    while (reader.state() == RequestReader::State::Reading && pos < bytes.size()) reader.feed(next_piece());
    if (reader.state() == RequestReader::State::HaveHead) {
      check_request(reader.request(), limits);  // the head alone routes too
      reader.continue_body();
      while (reader.state() == RequestReader::State::Reading && pos < bytes.size()) reader.feed(next_piece());
    }
    if (reader.state() == RequestReader::State::Error) {
      const int s = reader.error_status();
      if (s != 400 && s != 413 && s != 431) violated("error status", std::to_string(s));
      tally_fuzz::check_message(kTarget, tally::Error(reader.error_message()));
      out.end = "error " + std::to_string(s) + ' ' + reader.error_message();
      return out;
    }
    if (reader.state() != RequestReader::State::Done) {
      out.end = "incomplete";
      return out;
    }
    HttpRequest r = reader.take_request();
    check_request(r, limits);
    out.requests += summary(r) + '\n';
    carried = reader.leftover();
    if (carried.empty() && pos == bytes.size()) {
      out.end = "end";
      return out;
    }
  }
  out.end = "limit";
  return out;
}

void compare(const Outcome& whole, const Outcome& cut, const char* how) {
  const bool same_end = whole.end == cut.end || (whole.end.rfind("error", 0) == 0 && cut.end == "incomplete") ||
                        (cut.end.rfind("error", 0) == 0 && whole.end == "incomplete");
  if (whole.requests != cut.requests || !same_end)
    violated(how, whole.requests.substr(0, 120) + whole.end.substr(0, 80) + " | " + cut.requests.substr(0, 120) +
                      cut.end.substr(0, 80));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<size_t> cuts;
  for (int i = 0; i < 4; ++i) cuts.push_back(1 + ((data[0] >> (2 * i)) & 3) * 7);  // 1, 8, 15 or 22 bytes
  const Outcome whole = read_all(bytes, {});
  compare(whole, read_all(bytes, cuts), "pieces read otherwise than the whole");
  compare(whole, read_all(bytes, {1}), "single bytes read otherwise than the whole");
  return 0;
}
