#include "server/api_server.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/printable.h"
#include "runtime/generation.h"
#include "server/api_error.h"
#include "server/completion_format.h"
#include "server/kv_plan_api.h"
#include "server/requests.h"
#include "server/web_assets.h"
#include "sizing/model_shape.h"

namespace tally::server {

using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

void send_error(HttpResponse& res, const ApiError& e) {
  res.status = e.status;
  res.content_type = "application/json";
  if (e.retry_after > 0) res.set_header("Retry-After", std::to_string(e.retry_after));
  res.body = dump(error_body(e));
}

void send_json(HttpResponse& res, const json& j) {
  res.content_type = "application/json";
  res.body = dump(j);
}

// Untrusted request text for the log: one line, control bytes escaped, cut.
std::string loggable(std::string_view s) {
  PrintableOptions o;
  o.max_bytes = 256;
  o.escape_quotes = false;
  return printable(s, o);
}

}  // namespace

bool bearer_matches(std::string_view header, std::string_view key) {
  const std::string want = fmt::format("Bearer {}", key);
  // Every byte of the expected value is compared, whatever differs first; the lengths must agree.
  unsigned diff = header.size() != want.size();
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned>(want[i] ^ (i < header.size() ? header[i] : 0));
  return diff == 0;
}

ApiServer::ApiServer(const Model& model, const Tokenizer& tok, Scheduler& scheduler, Metrics& metrics,
                     ServerOptions opts)
    : model_(model), tok_(tok), scheduler_(scheduler), metrics_(metrics), opts_(std::move(opts)) {
  try {
    tmpl_ = std::make_unique<ChatTemplate>(chat_template_of(model));
    tools_.shows_tools = template_shows_tools(*tmpl_);
    tools_.format = tool_format(tmpl_->source());
  } catch (const Error& e) {
    tmpl_error_ = e.what();  // chat completions then answer 400 with this; the rest works
  }
  add_routes();
  HttpHooks hooks;
  hooks.admit = [this](const HttpRequest& head, HttpResponse& res) { return admit(head, res); };
  hooks.error = [](HttpResponse& res, int status, const std::string& message) {
    send_error(res, ApiError(status, status >= 500 ? "server_error" : "invalid_request_error", message));
  };
  hooks.log = [this](const HttpRequest& req, const HttpResponse& res, const std::string& route) { log(req, res, route); };
  http_ = std::make_unique<HttpServer>(opts_.http, router_, std::move(hooks));
}

ApiServer::~ApiServer() = default;

void ApiServer::add_routes() {
  // Every handler's errors become OpenAI error objects.
  auto wrap = [](auto fn) {
    return [fn](const HttpRequest& req, HttpResponse& res) {
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const Error& e) {
        send_error(res, ApiError(400, "invalid_request_error", e.what()));
      }
    };
  };
  auto page = [](const unsigned char* data, size_t size, const char* type) {
    return [=](const HttpRequest&, HttpResponse& res) {
      res.content_type = type;
      res.body.assign(reinterpret_cast<const char*>(data), size);
    };
  };
  router_.add("GET", "/", page(kIndexHtml, kIndexHtmlSize, "text/html; charset=utf-8"));
  router_.add("GET", "/index.html", page(kIndexHtml, kIndexHtmlSize, "text/html; charset=utf-8"));
  router_.add("GET", "/openapi.json", page(kOpenApiJson, kOpenApiJsonSize, "application/json"));
  router_.add("GET", "/health", wrap([this](auto& q, auto& r) { health(q, r); }));
  router_.add("GET", "/metrics", wrap([this](auto& q, auto& r) { metrics(q, r); }));
  router_.add("GET", "/v1/models", wrap([this](auto& q, auto& r) { models(q, r); }));
  router_.add("POST", "/tokenize", wrap([this](auto& q, auto& r) { tokenize(q, r); }));
  router_.add("POST", "/detokenize", wrap([this](auto& q, auto& r) { detokenize(q, r); }));
  router_.add("POST", "/v1/embeddings", wrap([this](auto& q, auto& r) { embeddings(q, r); }));
  router_.add("POST", "/v1/kv-plan", wrap([this](auto& q, auto& r) { kv_plan(q, r); }));
  router_.add("POST", "/v1/chat/completions", wrap([this](auto& q, auto& r) { generate(true, q, r); }));
  router_.add("POST", "/v1/completions", wrap([this](auto& q, auto& r) { generate(false, q, r); }));
}

bool ApiServer::admit(const HttpRequest& head, HttpResponse& res) const {
  if (opts_.api_key.empty() || head.path == "/" || head.path == "/health" || head.path == "/openapi.json" ||
      head.path == "/index.html")
    return true;
  if (head.header_count("authorization") == 1 && bearer_matches(head.header("authorization"), opts_.api_key))
    return true;
  send_error(res, ApiError(401, "authentication_error",
                           "a valid API key is needed: send the header 'Authorization: Bearer KEY'", "",
                           "invalid_api_key"));
  return false;
}

void ApiServer::log(const HttpRequest& req, const HttpResponse& res, const std::string& route) const {
  metrics_.request(route, res.status);
  const bool generation = route == "/v1/chat/completions" || route == "/v1/completions";
  if (generation && res.status == 200) return;  // logged with their tokens
  fmt::print(stderr, "tally serve: {} {} -> {}\n", loggable(req.method), loggable(req.path), res.status);
}

void ApiServer::health(const HttpRequest&, HttpResponse& res) const {
  const EngineGauges g = scheduler_.gauges();
  send_json(res, {{"status", "ok"}, {"running", g.running_requests}, {"queued", g.queue_depth}});
}

void ApiServer::metrics(const HttpRequest&, HttpResponse& res) const {
  res.content_type = "text/plain; version=0.0.4";
  res.body = metrics_.text(scheduler_.gauges());
}

void ApiServer::models(const HttpRequest&, HttpResponse& res) const {
  send_json(res, {{"object", "list"},
                  {"data",
                   {{{"id", opts_.model_name},
                     {"object", "model"},
                     {"created", 0},
                     {"owned_by", "tally"},
                     {"meta", {{"n_ctx", scheduler_.n_ctx()}, {"n_vocab", model_.config().n_vocab}}}}}}});
}

void ApiServer::tokenize(const HttpRequest& req, HttpResponse& res) const {
  const auto b = parse_body(req.body);
  if (!b.contains("content") || !b["content"].is_string()) bad_request("content", "'content' must be a string");
  bool add_special = false;
  if (b.contains("add_special")) {
    if (!b["add_special"].is_boolean()) bad_request("add_special", "'add_special' must be true or false");
    add_special = b["add_special"].get<bool>();
  }
  send_json(res, {{"tokens", tok_.encode(b["content"].get<std::string>(), add_special, false)}});
}

void ApiServer::detokenize(const HttpRequest& req, HttpResponse& res) const {
  const auto b = parse_body(req.body);
  if (!b.contains("tokens") || !b["tokens"].is_array()) bad_request("tokens", "'tokens' must be a list of token ids");
  std::vector<int32_t> ids;
  for (const auto& v : b["tokens"]) {
    if (!v.is_number_integer()) bad_request("tokens", "'tokens' must hold whole numbers, not {}", json_type(v));
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= tok_.n_vocab()) bad_request("tokens", "token id {} is outside the vocabulary [0, {})", id, tok_.n_vocab());
    ids.push_back(static_cast<int32_t>(id));
  }
  send_json(res, {{"content", tok_.decode(ids)}});
}

void ApiServer::embeddings(const HttpRequest& req, HttpResponse& res) const {
  const auto b = parse_body(req.body);
  EmbeddingRequest er = parse_embedding_request(b, tok_, model_.config().n_embd);
  auto& inputs = er.inputs;
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (static_cast<int64_t>(inputs[i].size()) > model_.config().n_ctx_train)
      bad_request("input", "input {} has {} tokens, more than the model's context of {}", i, inputs[i].size(),
                  model_.config().n_ctx_train);
    total += static_cast<int64_t>(inputs[i].size());
  }
  // Computed by the engine thread on the engine's threads, queued like generations.
  const auto vectors = scheduler_.submit_embeddings(std::move(inputs))->wait();
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    std::vector<float> v = vectors[i];
    double norm = 0;
    for (float x : v) norm += static_cast<double>(x) * x;
    norm = std::sqrt(norm);
    for (float& x : v) x = norm > 0 ? static_cast<float>(x / norm) : 0.0f;
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", embedding_value(v, er)}});
  }
  send_json(res, {{"object", "list"},
                  {"data", data},
                  {"model", opts_.model_name},
                  {"usage", {{"prompt_tokens", total}, {"total_tokens", total}}}});
}

void ApiServer::kv_plan(const HttpRequest& req, HttpResponse& res) const {
  send_json(res, kv_plan_response(nlohmann::json(parse_body(req.body)), shape_from_gguf(model_.file())));
}

const grammar::Vocabulary& ApiServer::vocabulary() {
  std::call_once(vocab_once_, [this] {
    vocab_ = std::make_unique<grammar::Vocabulary>(
        grammar_vocabulary(tok_, static_cast<int32_t>(model_.config().n_vocab)));
  });
  return *vocab_;
}

void ApiServer::generate(bool chat, const HttpRequest& req, HttpResponse& res) {
  const auto b = parse_body(req.body);
  GenerationRequest gr;
  if (chat) {
    if (!tmpl_) throw ApiError(400, "invalid_request_error", fmt::format("chat is unavailable: {}", tmpl_error_));
    gr = parse_chat_request(b, tok_, *tmpl_, tools_);
    if (gr.call_required) {
      // The reply must be a call: decoded under a grammar of calls to any of the tools (one or, with
      // parallel_tool_calls, several), or of one call to the named function.
      nlohmann::ordered_json offered = nlohmann::ordered_json::array();
      for (const auto& t : gr.tools)
        if (gr.call_name.empty() || t["function"]["name"] == gr.call_name) offered.push_back(t);
      try {
        gr.constraint = call_constraint(tools_.format, offered, vocabulary(), gr.parallel_calls && gr.call_name.empty());
      } catch (const Error& e) {
        bad_request("tools", "'tools': a call cannot be required of these tools: {}", e.what());
      }
    }
  } else {
    gr = parse_completion_request(b, tok_);
  }
  if (gr.format.kind != ResponseFormat::Kind::Text) {
    if (gr.call_required)
      bad_request("response_format", "'response_format' cannot go with a required call (tool_choice \"required\" or a "
                                     "named function): the reply is the call");
    try {
      const grammar::Vocabulary& v = vocabulary();
      gr.constraint = gr.format.kind == ResponseFormat::Kind::JsonObject
                          ? grammar::Constraint::json_object(v)
                          : grammar::Constraint::json_schema(v, b.at("response_format").at("json_schema").at("schema"));
    } catch (const Error& e) {
      const std::string param =
          gr.format.kind == ResponseFormat::Kind::JsonSchema ? "response_format.json_schema.schema" : "response_format";
      bad_request(param, "'{}': {}", param, e.what());
    }
  }
  const bool stream = gr.stream, logprobs = gr.logprobs, include_usage = gr.include_usage;
  const int n = gr.n;
  std::optional<ToolCallParser> tool_calls = gr.tool_calls;
  const bool calls_certain = gr.call_required;
  auto job = scheduler_.submit(std::move(gr));
  auto format = std::make_shared<CompletionFormat>(chat, tok_, (chat ? "chatcmpl-" : "cmpl-") + job->id(),
                                                   opts_.model_name, logprobs, n, include_usage, std::move(tool_calls),
                                                   calls_certain);
  auto log_done = [job, chat](const char* how) {
    const double total = std::chrono::duration<double, std::milli>(Clock::now() - job->submitted()).count();
    fmt::print(stderr, "tally serve: {} {} {}: {} prompt tokens ({} cached), {} generated, first token {:.0f} ms, total {:.0f} ms\n",
               chat ? "chat" : "completion", job->id(), how, job->prompt_tokens(), job->cached_tokens(),
               job->completion_tokens(), job->ttft_ms(), total);
  };

  if (!stream) {
    Event e;
    while (!job->done())
      if (job->next(e, std::chrono::milliseconds(200))) format->add(e);
    send_json(res, format->whole(*job));
    log_done("done");
    return;
  }

  // Server-sent events: one "data: {chunk}" per token (and per choice's end), then "data: [DONE]".
  struct StreamState {
    bool started = false, finished = false;
  };
  auto state = std::make_shared<StreamState>();
  res.content_type = "text/event-stream";
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // proxies must pass each event on at once
  res.stream = [job, state, format](StreamWriter& w) {
    if (!state->started) {
      state->started = true;
      if (!w.write(format->stream_start())) return false;
    }
    // Back to the connection at least every 250 ms, so that a stopping server is
    // not held by a stream whose events never pause.
    const auto until = Clock::now() + std::chrono::milliseconds(250);
    Event e;
    while (Clock::now() < until && job->next(e, std::chrono::milliseconds(50)))
      if (!w.write(format->stream_event(e))) return false;
    if (job->done()) {
      if (!w.write(format->stream_end(*job))) return false;
      state->finished = true;
      return false;
    }
    return !w.client_gone();
  };
  res.on_close = [job, state, log_done](bool completed) {
    const bool whole = completed && state->finished;
    if (!whole) job->cancel();  // the client went away: its blocks go back now
    log_done(whole ? "streamed" : "cancelled");
  };
}

}  // namespace tally::server
