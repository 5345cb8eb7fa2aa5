#pragma once
// The HTTP face of the server: OpenAI's endpoints (chat and text
// completions, streamed as server-sent events or whole; models; embeddings),
// /health, /metrics (Prometheus), /tokenize, /detokenize, /v1/kv-plan (the
// cache planner), /openapi.json and the web page at /. One handler per
// endpoint; generation and embeddings go through the Scheduler (its engine
// thread), the rest is answered on the connection's thread. Errors are OpenAI's error objects with the HTTP
// status; with an API key, every path but /, /health and /openapi.json needs
// "Authorization: Bearer KEY" (one such header, matching whole). Logs one
// line per request on stderr, its untrusted parts escaped.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "grammar/grammar.h"
#include "model/model.h"
#include "server/http.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tally::server {

struct ServerOptions {
  HttpServerOptions http;      // address, limits, timeouts, connection caps
  std::string api_key;         // "": no authentication (a key must be non-empty, printable ASCII)
  std::string model_name;      // the id /v1/models reports
};

class ApiServer {
 public:
  ApiServer(const Model& model, const Tokenizer& tok, Scheduler& scheduler, Metrics& metrics, ServerOptions opts);
  ~ApiServer();

  // Binds (false, with the reason in *error, when it cannot).
  bool bind(std::string* error) { return http_->bind(error); }
  int port() const { return http_->port(); }
  // Serves until stop(); blocking.
  void serve() { http_->serve(); }
  void stop() { http_->stop(); }

 private:
  void add_routes();
  bool admit(const HttpRequest& head, HttpResponse& res) const;
  void log(const HttpRequest& req, const HttpResponse& res, const std::string& route) const;

  void health(const HttpRequest&, HttpResponse&) const;
  void metrics(const HttpRequest&, HttpResponse&) const;
  void models(const HttpRequest&, HttpResponse&) const;
  void tokenize(const HttpRequest&, HttpResponse&) const;
  void detokenize(const HttpRequest&, HttpResponse&) const;
  void embeddings(const HttpRequest&, HttpResponse&) const;
  void kv_plan(const HttpRequest&, HttpResponse&) const;
  void generate(bool chat, const HttpRequest&, HttpResponse&);
  // The model's vocabulary for grammars, built on the first request that needs one.
  const grammar::Vocabulary& vocabulary();

  const Model& model_;
  const Tokenizer& tok_;
  std::unique_ptr<ChatTemplate> tmpl_;  // null when the model has no supported template
  std::string tmpl_error_;
  ToolSupport tools_;  // what the template does with tools
  std::once_flag vocab_once_;
  std::unique_ptr<grammar::Vocabulary> vocab_;  // once vocab_once_ ran
  Scheduler& scheduler_;
  Metrics& metrics_;
  ServerOptions opts_;
  Router router_;
  std::unique_ptr<HttpServer> http_;
};

// True when `header` is exactly "Bearer " + key (compared in time independent of where they differ).
bool bearer_matches(std::string_view header, std::string_view key);

}  // namespace tally::server
