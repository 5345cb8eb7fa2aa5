#include "server/api_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/embedder.h"
#include "server/api_error.h"
#include "server/kv_plan_api.h"
#include "server/requests.h"
#include "server/web_assets.h"
#include "sizing/model_shape.h"

namespace tally::server {

using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kListenBacklog = 1024;  // connections the kernel completes before they are accepted

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after > 0) res.set_header("Retry-After", std::to_string(e.retry_after));
  res.set_content(dump(error_body(e)), "application/json");
}

void send_json(httplib::Response& res, const json& j) { res.set_content(dump(j), "application/json"); }

std::string token_piece(const Tokenizer& tok, int32_t id) { return tok.token_bytes(id, false); }

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// The logprobs of one token event, in the chat API's shape.
json chat_logprob(const Tokenizer& tok, const Event& e) {
  const std::string piece = token_piece(tok, e.token);
  json top = json::array();
  for (const auto& [id, lp] : e.top) {
    const std::string p = token_piece(tok, id);
    top.push_back({{"token", p}, {"logprob", lp}, {"bytes", bytes_of(p)}});
  }
  return {{"token", piece}, {"logprob", e.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}};
}

json usage_of(const Job& job) {
  return {{"prompt_tokens", job.prompt_tokens()},
          {"completion_tokens", job.completion_tokens()},
          {"total_tokens", job.prompt_tokens() + job.completion_tokens()},
          {"prompt_tokens_details", {{"cached_tokens", job.cached_tokens()}}}};
}

}  // namespace

ApiServer::ApiServer(const Model& model, const Tokenizer& tok, Scheduler& scheduler, Metrics& metrics,
                     ServerOptions opts)
    : model_(model), tok_(tok), scheduler_(scheduler), metrics_(metrics), opts_(std::move(opts)),
      http_(std::make_unique<httplib::Server>()) {
  try {
    tmpl_ = std::make_unique<ChatTemplate>(ChatTemplate::from_gguf(model.file()));
  } catch (const Error& e) {
    tmpl_error_ = e.what();  // chat completions then answer 400 with this; the rest works
  }
  const int threads = std::max(4, opts_.http_threads);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // cpp-httplib listens with a backlog of 5: a burst of clients connecting at once then waits
  // for SYN retransmissions (seconds) or times out. Keep the socket to widen the backlog in bind().
  http_->set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd_ = static_cast<int>(sock);
  });
  http_->set_payload_max_length(opts_.max_body_bytes);
  http_->set_read_timeout(30);
  http_->set_write_timeout(30);
  routes();
}

ApiServer::~ApiServer() = default;

bool ApiServer::bind(std::string* error) {
  bool bound = false;
  if (opts_.port == 0) {
    port_ = http_->bind_to_any_port(opts_.host);
    bound = port_ > 0;
  } else if (http_->bind_to_port(opts_.host, opts_.port)) {
    port_ = opts_.port;
    bound = true;
  }
  if (bound) {
    // listen() again on a listening socket sets its backlog (the kernel caps it at somaxconn).
    if (listen_fd_ >= 0) ::listen(listen_fd_, kListenBacklog);
    return true;
  }
  *error = fmt::format("cannot listen on {}:{} (in use, or not an address of this machine)", opts_.host, opts_.port);
  return false;
}

void ApiServer::serve() { http_->listen_after_bind(); }
void ApiServer::stop() { http_->stop(); }

bool ApiServer::authorized(const std::string& header) const {
  if (opts_.api_key.empty()) return true;
  const std::string want = "Bearer " + opts_.api_key;
  // Constant time in the key: every byte is compared, whatever differs first.
  unsigned diff = header.size() != want.size();
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned>(want[i] ^ (i < header.size() ? header[i] : 0));
  return diff == 0;
}

void ApiServer::routes() {
  httplib::Server& s = *http_;

  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/" || req.path == "/health" || req.path == "/openapi.json" || req.path == "/index.html")
      return httplib::Server::HandlerResponse::Unhandled;
    if (authorized(req.get_header_value("Authorization"))) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, "authentication_error",
                             "a valid API key is needed: send the header 'Authorization: Bearer KEY'", "",
                             "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });

  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // an answer of ours already
    const char* type = res.status >= 500 ? "server_error" : "invalid_request_error";
    std::string msg = res.status == 404   ? fmt::format("no such endpoint: {} {}", req.method, req.path)
                      : res.status == 413 ? "the request body is too large"
                      : res.status == 405 ? fmt::format("{} is not allowed on {}", req.method, req.path)
                                          : fmt::format("HTTP {}", res.status);
    res.set_content(dump(error_body(ApiError(res.status, type, msg))), "application/json");
  });

  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const Error& e) {
      send_error(res, ApiError(400, "invalid_request_error", e.what()));
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, "server_error", fmt::format("internal error: {}", e.what())));
    }
  });

  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.request(req.path, res.status);
    if (req.path == "/v1/chat/completions" || req.path == "/v1/completions") return;  // logged with their tokens
    fmt::print(stderr, "tally serve: {} {} -> {}\n", req.method, req.path, res.status);
  });

  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(reinterpret_cast<const char*>(kIndexHtml), kIndexHtmlSize, "text/html; charset=utf-8");
  });
  s.Get("/openapi.json", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(reinterpret_cast<const char*>(kOpenApiJson), kOpenApiJsonSize, "application/json");
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const EngineGauges g = scheduler_.gauges();
    send_json(res, {{"status", "ok"}, {"running", g.running_requests}, {"queued", g.queue_depth}});
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.text(scheduler_.gauges()), "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, {{"object", "list"},
                    {"data",
                     {{{"id", opts_.model_name},
                       {"object", "model"},
                       {"created", 0},
                       {"owned_by", "tally"},
                       {"meta", {{"n_ctx", scheduler_.n_ctx()}, {"n_vocab", model_.config().n_vocab}}}}}}});
  });

  s.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    const json b = parse_body(req.body);
    if (!b.contains("content") || !b["content"].is_string())
      bad_request("content", "'content' must be a string");
    bool add_special = false;
    if (b.contains("add_special")) {
      if (!b["add_special"].is_boolean()) bad_request("add_special", "'add_special' must be true or false");
      add_special = b["add_special"].get<bool>();
    }
    send_json(res, {{"tokens", tok_.encode(b["content"].get<std::string>(), add_special, false)}});
  });
  s.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    const json b = parse_body(req.body);
    if (!b.contains("tokens") || !b["tokens"].is_array()) bad_request("tokens", "'tokens' must be a list of token ids");
    std::vector<int32_t> ids;
    for (const json& v : b["tokens"]) {
      if (!v.is_number_integer()) bad_request("tokens", "'tokens' must hold whole numbers, not {}", json_type(v));
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id >= tok_.n_vocab()) bad_request("tokens", "token id {} is outside the vocabulary [0, {})", id, tok_.n_vocab());
      ids.push_back(static_cast<int32_t>(id));
    }
    send_json(res, {{"content", tok_.decode(ids)}});
  });

  s.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
    const json b = parse_body(req.body);
    const auto inputs = parse_embedding_inputs(b, tok_);
    json data = json::array();
    int64_t total = 0;
    std::lock_guard<std::mutex> lock(embed_mutex_);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (static_cast<int64_t>(inputs[i].size()) > model_.config().n_ctx_train)
        bad_request("input", "input {} has {} tokens, more than the model's context of {}", i, inputs[i].size(),
                    model_.config().n_ctx_train);
      Embedding e = embed(model_, inputs[i], -1, Pooling::Mean, opts_.n_threads);
      double norm = 0;
      for (float v : e.values) norm += static_cast<double>(v) * v;
      norm = std::sqrt(norm);
      for (float& v : e.values) v = norm > 0 ? static_cast<float>(v / norm) : 0.0f;
      data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", e.values}});
      total += static_cast<int64_t>(inputs[i].size());
    }
    send_json(res, {{"object", "list"},
                    {"data", data},
                    {"model", opts_.model_name},
                    {"usage", {{"prompt_tokens", total}, {"total_tokens", total}}}});
  });

  s.Post("/v1/kv-plan", [this](const httplib::Request& req, httplib::Response& res) {
    send_json(res, kv_plan_response(parse_body(req.body), shape_from_gguf(model_.file())));
  });

  // The two generation endpoints share everything but parsing and the response's shape.
  auto generate = [this](bool chat, const httplib::Request& req, httplib::Response& res) {
    const json b = parse_body(req.body);
    GenerationRequest gr;
    if (chat) {
      if (!tmpl_) throw ApiError(400, "invalid_request_error", fmt::format("chat is unavailable: {}", tmpl_error_));
      gr = parse_chat_request(b, tok_, *tmpl_);
    } else {
      gr = parse_completion_request(b, tok_);
    }
    const bool stream = gr.stream, include_usage = gr.include_usage, logprobs = gr.logprobs;
    const int n = gr.n;
    auto job = scheduler_.submit(std::move(gr));
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + job->id();
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    const std::string model = opts_.model_name;
    const char* object = chat ? "chat.completion" : "text_completion";
    auto log_done = [this, job, chat](const char* how) {
      const double total = std::chrono::duration<double, std::milli>(Clock::now() - job->submitted()).count();
      fmt::print(stderr, "tally serve: {} {} {}: {} prompt tokens ({} cached), {} generated, first token {:.0f} ms, total {:.0f} ms\n",
                 chat ? "chat" : "completion", job->id(), how, job->prompt_tokens(), job->cached_tokens(),
                 job->completion_tokens(), job->ttft_ms(), total);
    };

    if (!stream) {
      std::vector<std::string> text(static_cast<size_t>(n));
      std::vector<std::string> finish(static_cast<size_t>(n));
      std::vector<json> lps(static_cast<size_t>(n), json::array());
      std::vector<json> legacy_tokens(static_cast<size_t>(n), json::array()), legacy_lp(static_cast<size_t>(n), json::array()),
          legacy_top(static_cast<size_t>(n), json::array());
      Event e;
      while (!job->done()) {
        if (!job->next(e, std::chrono::milliseconds(200))) continue;
        const size_t i = static_cast<size_t>(e.choice);
        if (e.kind == Event::Kind::End) {
          finish[i] = e.finish_reason;
          continue;
        }
        text[i] += e.text;
        if (logprobs && e.token >= 0) {
          if (chat) {
            lps[i].push_back(chat_logprob(tok_, e));
          } else {
            legacy_tokens[i].push_back(token_piece(tok_, e.token));
            legacy_lp[i].push_back(e.logprob);
            json top = json::object();
            for (const auto& [tid, lp] : e.top) top[token_piece(tok_, tid)] = lp;
            legacy_top[i].push_back(top);
          }
        }
      }
      json choices = json::array();
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        if (chat) {
          choices.push_back({{"index", i},
                             {"message", {{"role", "assistant"}, {"content", text[i]}}},
                             {"logprobs", logprobs ? json{{"content", lps[i]}} : json(nullptr)},
                             {"finish_reason", finish[i]}});
        } else {
          choices.push_back({{"index", i},
                             {"text", text[i]},
                             {"logprobs", logprobs ? json{{"tokens", legacy_tokens[i]}, {"token_logprobs", legacy_lp[i]},
                                                          {"top_logprobs", legacy_top[i]}}
                                                   : json(nullptr)},
                             {"finish_reason", finish[i]}});
        }
      }
      send_json(res, {{"id", id},
                      {"object", object},
                      {"created", created},
                      {"model", model},
                      {"system_fingerprint", "tally"},
                      {"choices", choices},
                      {"usage", usage_of(*job)}});
      log_done("done");
      return;
    }

    // Server-sent events: one "data: {chunk}" per token (and per choice's end), then "data: [DONE]".
    const char* chunk_object = chat ? "chat.completion.chunk" : "text_completion";
    auto chunk = [=](json choices) {
      json c{{"id", id}, {"object", chunk_object}, {"created", created}, {"model", model}, {"system_fingerprint", "tally"},
             {"choices", std::move(choices)}};
      if (include_usage) c["usage"] = nullptr;
      return "data: " + dump(c) + "\n\n";
    };
    struct StreamState {
      bool started = false, finished = false;
    };
    auto state = std::make_shared<StreamState>();
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // proxies must pass each event on at once
    res.set_chunked_content_provider(
        "text/event-stream",
        [=, this](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          if (!state->started) {
            state->started = true;
            if (chat)
              for (int i = 0; i < n; ++i)
                if (!send(chunk(json::array({{{"index", i},
                                              {"delta", {{"role", "assistant"}, {"content", ""}}},
                                              {"logprobs", nullptr},
                                              {"finish_reason", nullptr}}}))))
                  return false;
          }
          // Back to cpp-httplib at least every 250 ms, so that a stopping server is not held by
          // a stream whose events never pause.
          const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
          Event e;
          while (std::chrono::steady_clock::now() < until && job->next(e, std::chrono::milliseconds(50))) {
            json c;
            if (e.kind == Event::Kind::End) {
              c = chat ? json{{"index", e.choice}, {"delta", json::object()}, {"logprobs", nullptr},
                              {"finish_reason", e.finish_reason}}
                       : json{{"index", e.choice}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", e.finish_reason}};
            } else {
              json lp = nullptr;
              if (logprobs && e.token >= 0) {
                if (chat) {
                  lp = {{"content", json::array({chat_logprob(tok_, e)})}};
                } else {
                  json top = json::object();
                  for (const auto& [tid, v] : e.top) top[token_piece(tok_, tid)] = v;
                  lp = {{"tokens", {token_piece(tok_, e.token)}}, {"token_logprobs", {e.logprob}}, {"top_logprobs", {top}}};
                }
              }
              c = chat ? json{{"index", e.choice}, {"delta", {{"content", e.text}}}, {"logprobs", lp}, {"finish_reason", nullptr}}
                       : json{{"index", e.choice}, {"text", e.text}, {"logprobs", lp}, {"finish_reason", nullptr}};
            }
            if (!send(chunk(json::array({c})))) return false;
          }
          if (job->done()) {
            if (include_usage) {
              json u{{"id", id}, {"object", chunk_object}, {"created", created}, {"model", model},
                     {"system_fingerprint", "tally"}, {"choices", json::array()}, {"usage", usage_of(*job)}};
              if (!send("data: " + dump(u) + "\n\n")) return false;
            }
            if (!send("data: [DONE]\n\n")) return false;
            state->finished = true;
            sink.done();
            return true;
          }
          return sink.is_writable ? sink.is_writable() : true;
        },
        [job, state, log_done](bool success) {
          if (!success || !state->finished) job->cancel();  // the client went away: its blocks go back now
          log_done(success && state->finished ? "streamed" : "cancelled");
        });
  };
  s.Post("/v1/chat/completions",
         [generate](const httplib::Request& req, httplib::Response& res) { generate(true, req, res); });
  s.Post("/v1/completions", [generate](const httplib::Request& req, httplib::Response& res) { generate(false, req, res); });
}

}  // namespace tally::server
