#pragma once
// HTTP/1.1 as the server's handlers see it: a parsed request, the response a
// handler returns (whole, or streamed in pieces), and the route table that
// picks the handler. No sockets here (server/http_server.h owns them), so
// routing can be tested and fuzzed on its own.
//
// Invariants: a Request's header names are lower case; its path starts with
// '/' and holds no query; a route table answers every (method, path) with a
// handler, 405 (with the methods the path allows) or 404, and names the
// route (or "other") for /metrics, whatever the path.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tally::server {

struct HttpRequest {
  std::string method;  // as sent ("GET", "POST", ...)
  std::string target;  // as sent: path and query
  std::string path;    // target up to '?'
  std::string query;   // after '?', "" if none
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in order
  std::string body;
  std::string remote_addr;
  bool keep_alive = true;  // what the client asked (HTTP/1.1 default, Connection: close)
  bool http10 = false;

  // The value of the first header `name` (lower case), "" if absent.
  std::string_view header(std::string_view name) const;
  int header_count(std::string_view name) const;
};

// Writes a streamed body piece by piece; false once the client is gone or
// stopped reading for the write timeout.
class StreamWriter {
 public:
  virtual ~StreamWriter() = default;
  virtual bool write(std::string_view piece) = 0;
  // True when the client closed its side (checked without blocking).
  virtual bool client_gone() = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type/Length, Connection
  std::string body;
  // A streamed body: called again and again with a writer until it returns
  // false (done). Each call should return within a fraction of a second so
  // that a stopping server is not held. on_close(completed) runs once at the
  // end: completed is false when the client went away first.
  std::function<bool(StreamWriter&)> stream;
  std::function<void(bool completed)> on_close;

  void set_header(std::string name, std::string value) { headers.emplace_back(std::move(name), std::move(value)); }
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

// The standard reason phrase of a status ("Not Found"), "Unknown" for others.
const char* http_reason(int status);

class Router {
 public:
  // One handler per (method, exact path). GET routes also answer HEAD.
  void add(std::string method, std::string path, HttpHandler h);

  struct Match {
    const HttpHandler* handler = nullptr;  // null: not routed
    int status = 200;                      // 404 or 405 when not routed
    std::string allow;                     // 405: "GET, HEAD"
    std::string route;                     // the path for /metrics: a route, or "other"
  };
  Match match(std::string_view method, std::string_view path) const;
  bool has_path(std::string_view path) const { return routes_.count(std::string(path)) != 0; }

 private:
  std::map<std::string, std::map<std::string, HttpHandler>, std::less<>> routes_;  // path -> method -> handler
};

}  // namespace tally::server
