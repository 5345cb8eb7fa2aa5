#include "server/http.h"

namespace tally::server {

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return {};
}

int HttpRequest::header_count(std::string_view name) const {
  int n = 0;
  for (const auto& h : headers) n += h.first == name;
  return n;
}

const char* http_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

void Router::add(std::string method, std::string path, HttpHandler h) {
  auto& methods = routes_[path];
  if (method == "GET") methods["HEAD"] = h;
  methods[std::move(method)] = std::move(h);
}

Router::Match Router::match(std::string_view method, std::string_view path) const {
  Match m;
  const auto p = routes_.find(path);
  if (p == routes_.end()) {
    m.status = 404;
    m.route = "other";
    return m;
  }
  m.route = p->first;
  const auto h = p->second.find(std::string(method));
  if (h != p->second.end()) {
    m.handler = &h->second;
    return m;
  }
  m.status = 405;
  for (const auto& [name, unused] : p->second) m.allow += (m.allow.empty() ? "" : ", ") + name;
  return m;
}

}  // namespace tally::server
