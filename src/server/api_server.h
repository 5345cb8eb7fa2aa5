#pragma once
// The HTTP face of the server: OpenAI's endpoints (chat and text
// completions, streamed as server-sent events or whole; models; embeddings),
// /health, /metrics (Prometheus), /tokenize, /detokenize, /v1/kv-plan (the
// cache planner), /openapi.json and the web page at /. Generation goes
// through the Scheduler; everything else is answered on the HTTP thread.
// Errors are OpenAI's error objects with the HTTP status; with an API key,
// every path but /, /health and /openapi.json needs "Authorization: Bearer KEY".
// Logs one line per request on stderr.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "model/model.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
}

namespace tally::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                  // "": no authentication
  size_t max_body_bytes = 4u << 20;     // larger bodies get 413
  int http_threads = 64;                // connections served at once (streams hold one each)
  int n_threads = 0;                    // for embeddings (0: all cores)
  std::string model_name;               // the id /v1/models reports
};

class ApiServer {
 public:
  ApiServer(const Model& model, const Tokenizer& tok, Scheduler& scheduler, Metrics& metrics, ServerOptions opts);
  ~ApiServer();

  // Binds (false, with the reason in *error, when it cannot).
  bool bind(std::string* error);
  int port() const { return port_; }
  // Serves until stop(); blocking.
  void serve();
  void stop();

 private:
  void routes();
  bool authorized(const std::string& header) const;

  const Model& model_;
  const Tokenizer& tok_;
  std::unique_ptr<ChatTemplate> tmpl_;  // null when the model has no supported template
  std::string tmpl_error_;
  Scheduler& scheduler_;
  Metrics& metrics_;
  ServerOptions opts_;
  int port_ = 0;
  int listen_fd_ = -1;  // the listening socket, once bound
  std::unique_ptr<httplib::Server> http_;
  std::mutex embed_mutex_;  // one embedding pass at a time
};

}  // namespace tally::server
