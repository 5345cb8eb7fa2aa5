#pragma once
// The server's sockets: listens, accepts, and gives each connection a thread
// that reads requests (server/http_parser.h), routes them (server/http.h),
// and writes the answers, whole or streamed (chunked), keeping the
// connection alive between requests.
//
// Hostile clients are bounded by time and count, not trusted to behave:
//   - a request's head must arrive within read_timeout of its first byte, and
//     its body within read_timeout after the head (408 otherwise): a client
//     that sends a header line every few seconds is cut off;
//   - a kept-alive connection waits idle_timeout for its next request;
//   - a write that makes no progress for write_timeout ends the connection
//     (a client that stops reading a stream is treated as gone);
//   - at most max_connections at once and, when set, max_connections_per_client
//     from one address (off by default: behind a proxy every client has the
//     proxy's address); a connection beyond either is answered 503 and closed
//     at once.
// Since every connection has its own thread, slow clients cannot starve the
// others (health checks, running streams) below those caps.
//
// Invariants: the listening socket never allows a second server on the
// same port (no SO_REUSEPORT); serve() returns only after every connection
// thread has ended; `hooks` outlive the server.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "server/http.h"
#include "server/http_parser.h"

namespace tally::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  HttpLimits limits;
  int read_timeout_s = 10;
  int idle_timeout_s = 30;
  int write_timeout_s = 30;
  int max_connections = 512;
  int max_connections_per_client = 0;  // 0: no cap per address
};

struct HttpHooks {
  // Called with a routed request's head, before its body is read: false when
  // it answered `res` itself (401: the body is then not read).
  std::function<bool(const HttpRequest& head, HttpResponse& res)> admit;
  // Fills `res` with the error body of an HTTP-level refusal (400, 404, 405, 408, 413, 431, 500, 503).
  std::function<void(HttpResponse& res, int status, const std::string& message)> error;
  // Each answer, as it goes out (before its bytes: a client that reads /metrics after its answer finds it
  // counted): the request (its head, for refusals), the answer, the route ("other" for unknown paths).
  std::function<void(const HttpRequest& req, const HttpResponse& res, const std::string& route)> log;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions opts, const Router& router, HttpHooks hooks);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; false with the reason ("address already in use") in *error.
  bool bind(std::string* error);
  int port() const { return port_; }
  // Accepts until stop(); then waits for the connections to end.
  void serve();
  // Thread-safe; serve() returns soon after.
  void stop();
  int connections() const;

 private:
  struct Conn;
  void connection(int fd, const std::string& addr);
  void refuse(int fd, const std::string& why);
  void linger_close(int fd) const;
  bool write_response(Conn& c, const HttpRequest& req, HttpResponse& res, bool keep_alive);
  void answer_error(Conn& c, const HttpRequest& head, int status, const std::string& message);

  HttpServerOptions opts_;
  const Router& router_;
  HttpHooks hooks_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  mutable std::mutex m_;
  std::condition_variable idle_;
  std::map<std::string, int> per_client_;  // open connections by address
  std::set<int> open_fds_;
};

}  // namespace tally::server
