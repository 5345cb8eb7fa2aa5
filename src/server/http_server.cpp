#include "server/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace tally::server {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kListenBacklog = 1024;  // connections the kernel completes before they are accepted
constexpr int kPollSliceMs = 100;     // how often a waiting connection looks at stopping_
constexpr int kLingerMs = 1000;       // a closing connection drops what the client still sends for this long
constexpr size_t kLingerBytes = 4u << 20;  // or until this much

int ms_until(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return ms <= 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, kPollSliceMs));
}

std::string address_of(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  else if (a.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof buf);
  return buf;
}

// A header value of ours never carries a line break (it would start a new header).
std::string header_safe(std::string v) {
  for (char& c : v)
    if (c == '\r' || c == '\n') c = ' ';
  return v;
}

}  // namespace

// One accepted socket: blocking reads and writes with deadlines, done with poll.
struct HttpServer::Conn : StreamWriter {
  int fd;
  std::string addr;
  const std::atomic<bool>& stopping;
  int write_timeout_s;
  bool chunked = false;  // the streamed body goes out in chunks (HTTP/1.1)
  bool broken = false;   // a write failed: the connection is done

  Conn(int fd_, std::string addr_, const std::atomic<bool>& stopping_, int write_timeout)
      : fd(fd_), addr(std::move(addr_)), stopping(stopping_), write_timeout_s(write_timeout) {}

  // Reads what is there into `out` once some bytes arrive. 0 bytes: the peer
  // closed; -1: the deadline passed, the server is stopping, or an error.
  ssize_t read_some(std::string& out, Clock::time_point deadline) {
    char buf[16384];
    for (;;) {
      if (stopping.load()) return -1;
      const int wait = ms_until(deadline);
      if (wait == 0 && Clock::now() >= deadline) return -1;
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, wait);
      if (r < 0 && errno != EINTR) return -1;
      if (r <= 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n > 0) out.assign(buf, static_cast<size_t>(n));
      return n;
    }
  }

  bool send_all(std::string_view data) {
    if (broken) return false;
    auto deadline = Clock::now() + std::chrono::seconds(write_timeout_s);
    while (!data.empty()) {
      pollfd p{fd, POLLOUT, 0};
      const int r = ::poll(&p, 1, ms_until(deadline));
      if (r < 0 && errno != EINTR) break;
      if (r <= 0) {
        if (Clock::now() >= deadline) break;
        continue;
      }
      const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) break;
      data.remove_prefix(static_cast<size_t>(n));
      deadline = Clock::now() + std::chrono::seconds(write_timeout_s);  // progress
    }
    broken = !data.empty();
    return !broken;
  }

  bool write(std::string_view piece) override {
    if (piece.empty()) return !broken;
    if (!chunked) return send_all(piece);
    std::string framed = fmt::format("{:x}\r\n", piece.size());
    framed.append(piece).append("\r\n");
    return send_all(framed);
  }

  bool client_gone() override {
    if (broken) return true;
    pollfd p{fd, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }
};

HttpServer::HttpServer(HttpServerOptions opts, const Router& router, HttpHooks hooks)
    : opts_(std::move(opts)), router_(router), hooks_(std::move(hooks)) {}

HttpServer::~HttpServer() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

bool HttpServer::bind(std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(opts_.port);
  if (const int rc = ::getaddrinfo(opts_.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    *error = fmt::format("cannot listen on {}:{}: {}", opts_.host, opts_.port, ::gai_strerror(rc));
    return false;
  }
  int err = 0;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    // SO_REUSEADDR lets a restarted server bind while old connections linger
    // in TIME_WAIT; Linux still refuses a second listener on the port.
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, kListenBacklog) == 0) {
      listen_fd_ = fd;
      break;
    }
    err = errno;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) {
    *error = fmt::format("cannot listen on {}:{}: {}", opts_.host, opts_.port,
                         err == EADDRINUSE ? "address already in use" : std::strerror(err));
    return false;
  }
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&local), &len);
  port_ = ntohs(local.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(local).sin6_port
                                             : reinterpret_cast<sockaddr_in&>(local).sin_port);
  return true;
}

int HttpServer::connections() const {
  std::lock_guard<std::mutex> lock(m_);
  return static_cast<int>(open_fds_.size());
}

void HttpServer::refuse(int fd, const std::string& why) {
  HttpResponse res;
  hooks_.error(res, 503, why);
  const std::string head =
      fmt::format("HTTP/1.1 503 Service Unavailable\r\nContent-Type: {}\r\nContent-Length: {}\r\nRetry-After: 1\r\n"
                  "Connection: close\r\n\r\n",
                  res.content_type, res.body.size());
  const std::string all = head + res.body;
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);  // never wait on a client we refuse
  [[maybe_unused]] const ssize_t n = ::send(fd, all.data(), all.size(), MSG_NOSIGNAL);
  ::close(fd);
}

void HttpServer::serve() {
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, 200);
    if (r <= 0) continue;
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // out of descriptors: let some close
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // streamed tokens go out at once
    const std::string addr = address_of(from);
    std::string refusal;
    {
      std::lock_guard<std::mutex> lock(m_);
      if (static_cast<int>(open_fds_.size()) >= opts_.max_connections)
        refusal = fmt::format("the server holds its maximum of {} connections (--max-connections); retry later",
                              opts_.max_connections);
      else if (opts_.max_connections_per_client > 0 && per_client_[addr] >= opts_.max_connections_per_client)
        refusal = fmt::format("this client holds the maximum of {} connections per address "
                              "(--max-connections-per-client); retry later",
                              opts_.max_connections_per_client);
      else {
        ++per_client_[addr];
        open_fds_.insert(fd);
      }
    }
    if (!refusal.empty()) {
      refuse(fd, refusal);
      continue;
    }
    try {
      std::thread([this, fd, addr] {
        connection(fd, addr);
        linger_close(fd);
        std::lock_guard<std::mutex> lock(m_);
        ::close(fd);
        open_fds_.erase(fd);
        if (--per_client_[addr] == 0) per_client_.erase(addr);
        idle_.notify_all();
      }).detach();
    } catch (const std::system_error&) {  // no thread to be had: refuse as at the cap
      {
        std::lock_guard<std::mutex> lock(m_);
        open_fds_.erase(fd);
        if (--per_client_[addr] == 0) per_client_.erase(addr);
      }
      refuse(fd, "the server cannot start a thread for this connection now; retry later");
    }
  }
  // Connections between requests leave within a poll slice; those in a
  // request are given a moment, then their sockets are shut so that they end.
  std::unique_lock<std::mutex> lock(m_);
  if (!idle_.wait_for(lock, std::chrono::seconds(3), [&] { return open_fds_.empty(); }))
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
  idle_.wait(lock, [&] { return open_fds_.empty(); });
}

void HttpServer::stop() { stopping_.store(true); }

void HttpServer::linger_close(int fd) const {
  // Closing with unread input makes the kernel send a reset, which can destroy
  // the answer just written (a 413 to a client still sending its body, a 408).
  // So: no more writes, then read and drop what comes for a moment.
  ::shutdown(fd, SHUT_WR);
  const auto until = Clock::now() + std::chrono::milliseconds(kLingerMs);
  char buf[16384];
  size_t dropped = 0;
  while (!stopping_.load() && dropped < kLingerBytes) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ms_until(until)) <= 0) {
      if (Clock::now() >= until) break;
      continue;
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    dropped += static_cast<size_t>(n);
  }
}

void HttpServer::answer_error(Conn& c, const HttpRequest& head, int status, const std::string& message) {
  HttpResponse res;
  hooks_.error(res, status, message);
  res.status = status;
  if (hooks_.log) hooks_.log(head, res, router_.match(head.method, head.path).route);
  write_response(c, head, res, false);
}

bool HttpServer::write_response(Conn& c, const HttpRequest& req, HttpResponse& res, bool keep_alive) {
  const bool head_only = req.method == "HEAD";
  const bool streamed = static_cast<bool>(res.stream) && !head_only;
  c.chunked = streamed && !req.http10;
  if (streamed && req.http10) keep_alive = false;  // the end of the body is the end of the connection
  std::string out = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\n", res.status, http_reason(res.status),
                                header_safe(res.content_type));
  if (!streamed)
    out += fmt::format("Content-Length: {}\r\n", res.body.size());
  else if (c.chunked)
    out += "Transfer-Encoding: chunked\r\n";
  for (const auto& [k, v] : res.headers) out += fmt::format("{}: {}\r\n", header_safe(k), header_safe(v));
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  if (!streamed) {
    if (!head_only) out += res.body;
    const bool ok = c.send_all(out);
    if (res.on_close) res.on_close(ok);
    return ok;
  }
  bool completed = false;
  if (c.send_all(out)) {
    try {
      while (!c.broken && res.stream(c)) {
      }
      completed = !c.broken && (!c.chunked || c.send_all("0\r\n\r\n"));
    } catch (...) {
      completed = false;  // a stream cannot change its status once sent: end it
    }
  }
  if (res.on_close) res.on_close(completed);
  return completed;
}

void HttpServer::connection(int fd, const std::string& addr) {
  Conn c(fd, addr, stopping_, opts_.write_timeout_s);
  std::string carried, bytes;
  bool first = true;
  const auto read_timeout = std::chrono::seconds(opts_.read_timeout_s);
  while (!stopping_.load()) {
    RequestReader reader(opts_.limits, std::move(carried));
    HttpRequest head;
    head.remote_addr = addr;
    // Until the first byte: the idle timeout (the read timeout for a new connection).
    auto deadline = Clock::now() + (first || reader.started() ? read_timeout : std::chrono::seconds(opts_.idle_timeout_s));
    bool counting_head = first || reader.started();
    auto read_into = [&](auto done) {
      while (!done()) {
        const ssize_t n = c.read_some(bytes, deadline);
        if (n <= 0) return n == 0 ? 0 : -1;
        if (!counting_head) {  // the request started: its head has the read timeout from now
          counting_head = true;
          deadline = Clock::now() + read_timeout;
        }
        reader.feed(bytes);
      }
      return 1;
    };
    const int got_head = read_into([&] { return reader.state() != RequestReader::State::Reading; });
    if (got_head <= 0) {
      if (got_head < 0 && reader.started() && !stopping_.load())
        answer_error(c, head, 408, fmt::format("the request's head did not arrive within {} s (--read-timeout)",
                                               opts_.read_timeout_s));
      return;
    }
    if (reader.state() == RequestReader::State::Error) {
      head.method = reader.request().method;
      head.path = reader.request().path;
      answer_error(c, head, reader.error_status(), reader.error_message());
      return;
    }
    head = reader.request();
    head.remote_addr = addr;
    const Router::Match route = router_.match(head.method, head.path);
    // Answered from the head alone; a body not read makes the connection unusable after.
    auto answer_now = [&](HttpResponse& res) {
      const bool keep = head.keep_alive && !reader.expects_body();
      if (hooks_.log) hooks_.log(head, res, route.route);
      write_response(c, head, res, keep);
      return keep;
    };
    if (!route.handler) {
      HttpResponse res;
      const std::string msg = route.status == 405
                                  ? fmt::format("{} is not allowed on {} (allowed: {})", head.method, head.path, route.allow)
                                  : fmt::format("no such endpoint: {} {}", head.method, head.path);
      hooks_.error(res, route.status, msg);
      res.status = route.status;
      if (route.status == 405) res.set_header("Allow", route.allow);
      if (!answer_now(res)) return;
      carried = reader.leftover();
      first = false;
      continue;
    }
    if (HttpResponse res; hooks_.admit && !hooks_.admit(head, res)) {
      if (!answer_now(res)) return;
      carried = reader.leftover();
      first = false;
      continue;
    }
    if (reader.expects_body() && head.header("expect") == "100-continue" && !head.http10 &&
        !c.send_all("HTTP/1.1 100 Continue\r\n\r\n"))
      return;
    deadline = Clock::now() + read_timeout;
    reader.continue_body();
    const int got_body = read_into([&] { return reader.state() != RequestReader::State::Reading; });
    if (got_body <= 0) {
      if (got_body < 0 && !stopping_.load())
        answer_error(c, head, 408, fmt::format("the request body did not arrive within {} s (--read-timeout)",
                                               opts_.read_timeout_s));
      return;
    }
    if (reader.state() == RequestReader::State::Error) {
      answer_error(c, head, reader.error_status(), reader.error_message());
      return;
    }
    HttpRequest req = reader.take_request();
    req.remote_addr = addr;
    carried = reader.leftover();
    HttpResponse res;
    try {
      (*route.handler)(req, res);
    } catch (const std::exception& e) {
      res = HttpResponse{};
      hooks_.error(res, 500, fmt::format("internal error: {}", e.what()));
      res.status = 500;
    }
    const bool keep = req.keep_alive && !stopping_.load();
    // Counted before the answer goes out: a client that reads /metrics right
    // after its answer finds the request in it.
    if (hooks_.log) hooks_.log(req, res, route.route);
    const bool written = write_response(c, req, res, keep);
    if (!written || !keep) return;
    first = false;
  }
}

}  // namespace tally::server
