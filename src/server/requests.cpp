#include "server/requests.h"

#include "server/api_error.h"

#include "core/printable.h"

namespace tally::server {

using nlohmann::json;

namespace {

constexpr int kMaxDepth = 64;

const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& body, const char* name, double lo, double hi) {
  const json* v = field(body, name);
  if (!v->is_number()) bad_request(name, "'{}' must be a number, not {}", name, json_type(*v));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad_request(name, "'{}' must be between {} and {}, got {}", name, lo, hi, x);
  return x;
}

int64_t integer(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v->is_number_integer()) bad_request(name, "'{}' must be a whole number, not {}", name, json_type(*v));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
    bad_request(name, "'{}' must be between {} and {}", name, lo, hi);
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad_request(name, "'{}' must be between {} and {}, got {}", name, lo, hi, x);
  return x;
}

bool boolean(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v->is_boolean()) bad_request(name, "'{}' must be true or false, not {}", name, json_type(*v));
  return v->get<bool>();
}

// A field tally does not implement (tools, response_format, logit_bias, ...)
// is refused by name: answering as if it were absent would silently give the
// client something else than it asked for. "user" (an end-user id for the
// provider's abuse monitoring) changes no output, so it is taken.
void refuse_unknown_fields(const json& b, const std::vector<std::string_view>& known, std::string_view endpoint) {
  for (const auto& [name, value] : b.items()) {
    bool ok = name == "user";
    for (std::string_view k : known) ok = ok || name == k;
    if (!ok)
      bad_request(excerpt(name), "'{}' is not supported by {} (tally does not implement it, and would otherwise ignore it)",
                  excerpt(name), endpoint);
  }
}

// The fields chat and completions both read.
std::vector<std::string_view> generation_fields() {
  return {"model", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "seed", "n",
          "max_completion_tokens", "max_tokens", "stop", "stream", "stream_options", "logprobs"};
}

// What chat and completions share: sampling, limits, stop strings, streaming.
void common_fields(const json& b, GenerationRequest& r) {
  if (const json* m = field(b, "model")) {
    if (!m->is_string()) bad_request("model", "'model' must be a string, not {}", json_type(*m));
    r.model = m->get<std::string>();
  }
  // OpenAI's defaults: temperature 1, top_p 1, no top-k or min-p.
  r.sampling.temperature = 1.0f;
  r.sampling.top_p = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.min_p = 0;
  if (field(b, "temperature")) r.sampling.temperature = static_cast<float>(number(b, "temperature", 0, 2));
  if (field(b, "top_p")) {
    r.sampling.top_p = static_cast<float>(number(b, "top_p", 0, 1));
    if (r.sampling.top_p <= 0) bad_request("top_p", "'top_p' must be greater than 0");
  }
  if (field(b, "top_k")) r.sampling.top_k = static_cast<int32_t>(integer(b, "top_k", 0, 1 << 20));
  if (field(b, "min_p")) r.sampling.min_p = static_cast<float>(number(b, "min_p", 0, 0.999999));
  if (field(b, "presence_penalty")) r.sampling.presence_penalty = static_cast<float>(number(b, "presence_penalty", -2, 2));
  if (field(b, "frequency_penalty"))
    r.sampling.frequency_penalty = static_cast<float>(number(b, "frequency_penalty", -2, 2));
  if (field(b, "seed")) {
    const json* v = field(b, "seed");
    if (!v->is_number_integer()) bad_request("seed", "'seed' must be a whole number, not {}", json_type(*v));
    r.sampling.seed = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
    r.seeded = true;
  }
  if (field(b, "n")) r.n = static_cast<int>(integer(b, "n", 1, 16));
  for (const char* name : {"max_completion_tokens", "max_tokens"})
    if (field(b, name)) {
      r.max_tokens = integer(b, name, 1, int64_t{1} << 30);
      break;
    }
  if (const json* s = field(b, "stop")) {
    auto add = [&](const json& v) {
      if (!v.is_string()) bad_request("stop", "'stop' must be a string or a list of strings, not a list holding {}", json_type(v));
      if (v.get<std::string>().empty()) bad_request("stop", "'stop' strings must not be empty");
      r.stop.push_back(v.get<std::string>());
    };
    if (s->is_string()) {
      add(*s);
    } else if (s->is_array()) {
      if (s->size() > 4) bad_request("stop", "'stop' takes at most 4 strings, got {}", s->size());
      for (const json& v : *s) add(v);
    } else {
      bad_request("stop", "'stop' must be a string or a list of strings, not {}", json_type(*s));
    }
  }
  if (field(b, "stream")) r.stream = boolean(b, "stream");
  if (const json* so = field(b, "stream_options")) {
    if (!so->is_object()) bad_request("stream_options", "'stream_options' must be an object, not {}", json_type(*so));
    if (field(*so, "include_usage")) {
      const json* v = field(*so, "include_usage");
      if (!v->is_boolean())
        bad_request("stream_options.include_usage", "'stream_options.include_usage' must be true or false");
      r.include_usage = v->get<bool>();
    }
  }
}

std::string message_text(const json& content, size_t i) {
  const std::string param = fmt::format("messages[{}].content", i);
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(param, "'{}' must be a string or a list of text parts, not {}", param, json_type(content));
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string())
      bad_request(param, "'{}' parts must be {{\"type\": \"text\", \"text\": ...}} (only text is supported)", param);
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

std::string json_type(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "a value";
  }
}

json parse_body(std::string_view body) {
  json j;
  try {
    j = json::parse(body, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) throw ApiError(400, "invalid_request_error", "the JSON body nests deeper than 64 levels");
      return true;
    });
  } catch (const json::exception& e) {
    throw ApiError(400, "invalid_request_error", fmt::format("the body is not valid JSON ({})", e.what()));
  }
  if (!j.is_object()) throw ApiError(400, "invalid_request_error", fmt::format("the body must be a JSON object, not {}", json_type(j)));
  return j;
}

GenerationRequest parse_chat_request(const json& b, const Tokenizer& tok, const ChatTemplate& tmpl) {
  std::vector<std::string_view> known = generation_fields();
  known.insert(known.end(), {"messages", "top_logprobs"});
  refuse_unknown_fields(b, known, "/v1/chat/completions");
  GenerationRequest r;
  r.chat = true;
  const json* m = field(b, "messages");
  if (!m) bad_request("messages", "'messages' is required");
  if (!m->is_array()) bad_request("messages", "'messages' must be an array, not {}", json_type(*m));
  if (m->empty()) bad_request("messages", "'messages' must hold at least one message");
  std::vector<ChatMessage> msgs;
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!msg.is_object()) bad_request(at, "'{}' must be an object, not {}", at, json_type(msg));
    const json* role = field(msg, "role");
    if (!role || !role->is_string()) bad_request(at + ".role", "'{}.role' must be a string", at);
    std::string rs = role->get<std::string>();
    if (rs == "developer") rs = "system";  // OpenAI's newer name for the system role
    if (rs != "system" && rs != "user" && rs != "assistant")
      bad_request(at + ".role", "'{}.role' must be system, user or assistant (tools are not supported)", at);
    const json* content = field(msg, "content");
    if (!content) bad_request(at + ".content", "'{}.content' is required", at);
    msgs.push_back({rs, message_text(*content, i)});
  }
  common_fields(b, r);
  if (field(b, "logprobs")) r.logprobs = boolean(b, "logprobs");
  if (field(b, "top_logprobs")) {
    r.top_logprobs = static_cast<int>(integer(b, "top_logprobs", 0, 20));
    if (!r.logprobs) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  // Message contents are text: a message spelling a control token cannot forge the template's markup.
  r.prompt = tmpl.encode(tok, msgs, true);
  if (r.prompt.empty()) bad_request("messages", "the messages render to no tokens");
  return r;
}

GenerationRequest parse_completion_request(const json& b, const Tokenizer& tok) {
  std::vector<std::string_view> known = generation_fields();
  known.push_back("prompt");
  refuse_unknown_fields(b, known, "/v1/completions");
  GenerationRequest r;
  r.chat = false;
  const json* p = field(b, "prompt");
  if (!p) bad_request("prompt", "'prompt' is required");
  if (p->is_string()) {
    r.prompt = tok.encode(p->get<std::string>(), /*add_special=*/true, /*parse_special=*/false);
  } else if (p->is_array()) {
    for (const json& v : *p) {
      if (!v.is_number_integer())
        bad_request("prompt", "'prompt' must be a string or a list of token ids, not a list holding {}", json_type(v));
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id >= tok.n_vocab()) bad_request("prompt", "token id {} is outside the vocabulary [0, {})", id, tok.n_vocab());
      r.prompt.push_back(static_cast<int32_t>(id));
    }
  } else {
    bad_request("prompt", "'prompt' must be a string or a list of token ids, not {}", json_type(*p));
  }
  if (r.prompt.empty()) bad_request("prompt", "'prompt' has no tokens");
  common_fields(b, r);
  if (field(b, "logprobs")) {  // the completions API: the number of alternatives
    r.top_logprobs = static_cast<int>(integer(b, "logprobs", 0, 5));
    r.logprobs = true;
  }
  return r;
}

std::vector<std::vector<int32_t>> parse_embedding_inputs(const json& b, const Tokenizer& tok) {
  refuse_unknown_fields(b, {"model", "input", "encoding_format"}, "/v1/embeddings");  // encoding_format: the client's
  const json* in = field(b, "input");
  if (!in) bad_request("input", "'input' is required");
  std::vector<std::string> texts;
  if (in->is_string()) {
    texts.push_back(in->get<std::string>());
  } else if (in->is_array()) {
    if (in->empty()) bad_request("input", "'input' must hold at least one string");
    if (in->size() > 256) bad_request("input", "'input' takes at most 256 strings, got {}", in->size());
    for (const json& v : *in) {
      if (!v.is_string()) bad_request("input", "'input' must be a string or a list of strings, not a list holding {}", json_type(v));
      texts.push_back(v.get<std::string>());
    }
  } else {
    bad_request("input", "'input' must be a string or a list of strings, not {}", json_type(*in));
  }
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < texts.size(); ++i) {
    out.push_back(tok.encode(texts[i], /*add_special=*/true, /*parse_special=*/false));
    if (out.back().empty()) bad_request("input", "input {} has no tokens", i);
  }
  return out;
}

}  // namespace tally::server
