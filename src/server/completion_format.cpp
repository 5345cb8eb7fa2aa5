#include "server/completion_format.h"

#include <ctime>

namespace tally::server {

using nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

CompletionFormat::CompletionFormat(bool chat, const Tokenizer& tok, std::string id, std::string model, bool logprobs,
                                   int n, bool include_usage, std::optional<ToolCallParser> tools, bool calls_certain)
    : chat_(chat),
      tok_(tok),
      id_(std::move(id)),
      model_(std::move(model)),
      logprobs_(logprobs),
      include_usage_(include_usage),
      created_(static_cast<int64_t>(std::time(nullptr))),
      choices_(static_cast<size_t>(n)),
      tools_(std::move(tools)),
      calls_certain_(calls_certain && tools_) {
  for (Choice& c : choices_) c.logprobs = empty_logprobs();
}

json CompletionFormat::empty_logprobs() const {
  if (chat_) return {{"content", json::array()}};
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}};
}

void CompletionFormat::append_logprob(json& lp, const Event& e) const {
  const std::string piece = tok_.token_bytes(e.token, false);
  if (chat_) {
    json top = json::array();
    for (const auto& [id, v] : e.top) {
      const std::string p = tok_.token_bytes(id, false);
      top.push_back({{"token", p}, {"logprob", v}, {"bytes", bytes_of(p)}});
    }
    lp["content"].push_back({{"token", piece}, {"logprob", e.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}});
    return;
  }
  json top = json::object();
  for (const auto& [id, v] : e.top) top[tok_.token_bytes(id, false)] = v;
  lp["tokens"].push_back(piece);
  lp["token_logprobs"].push_back(e.logprob);
  lp["top_logprobs"].push_back(top);
}

json CompletionFormat::usage(const Job& job) {
  return {{"prompt_tokens", job.prompt_tokens()},
          {"completion_tokens", job.completion_tokens()},
          {"total_tokens", job.prompt_tokens() + job.completion_tokens()},
          {"prompt_tokens_details",
           {{"cached_tokens", job.cached_tokens()}, {"disk_cached_tokens", job.disk_cached_tokens()}}}};
}

json CompletionFormat::envelope(json choices, bool chunk) const {
  return {{"id", id_},
          {"object", chat_ ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"system_fingerprint", "tally"},
          {"choices", std::move(choices)}};
}

std::string CompletionFormat::sse(const json& j) const { return "data: " + dump(j) + "\n\n"; }

void CompletionFormat::add(const Event& e) {
  Choice& c = choices_.at(static_cast<size_t>(e.choice));
  if (e.kind == Event::Kind::End) {
    c.finish = e.finish_reason;
    return;
  }
  c.text += e.text;
  if (logprobs_ && e.token >= 0) append_logprob(c.logprobs, e);
}

json CompletionFormat::whole(const Job& job) const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json choice{{"index", i}, {"logprobs", logprobs_ ? c.logprobs : json(nullptr)}, {"finish_reason", c.finish}};
    if (chat_ && tools_) {
      const Reply r = reply(c.text, c.finish);
      choice["message"] = {{"role", "assistant"}, {"content", r.content}};
      if (!r.tool_calls.is_null()) choice["message"]["tool_calls"] = r.tool_calls;
      choice["finish_reason"] = r.finish;
      if (!r.warning.empty()) choice["tally_warning"] = r.warning;
    } else if (chat_) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    choices.push_back(std::move(choice));
  }
  json r = envelope(std::move(choices), false);
  r["usage"] = usage(job);
  return r;
}

std::string CompletionFormat::stream_start() const {
  if (!chat_) return {};
  std::string out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    json c = envelope(json::array({{{"index", i},
                                    {"delta", {{"role", "assistant"}, {"content", ""}}},
                                    {"logprobs", nullptr},
                                    {"finish_reason", nullptr}}}),
                      true);
    if (include_usage_) c["usage"] = nullptr;
    out += sse(c);
  }
  return out;
}

json CompletionFormat::call_json(const ToolCall& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

CompletionFormat::Reply CompletionFormat::reply(const std::string& text, const std::string& finish) const {
  const ParsedReply p = tools_->parse(text);
  Reply r;
  r.content = blank(p.content) ? json(nullptr) : json(p.content);
  if (!p.calls.empty()) {
    r.tool_calls = json::array();
    for (const ToolCall& c : p.calls) r.tool_calls.push_back(call_json(c));
  }
  // A reply cut short keeps its reason ("length"); one that ended on its own with calls asks for them.
  r.finish = !p.calls.empty() && finish == "stop" ? "tool_calls" : finish;
  r.warning = p.warning;
  return r;
}

std::string CompletionFormat::stream_event(const Event& e) {
  if (chat_ && tools_) return stream_tool_event(e);
  json choice{{"index", e.choice}};
  if (e.kind == Event::Kind::End) {
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = e.finish_reason;
    if (chat_)
      choice["delta"] = json::object();
    else
      choice["text"] = "";
  } else {
    json lp = nullptr;
    if (logprobs_ && e.token >= 0) {
      lp = empty_logprobs();
      append_logprob(lp, e);
    }
    choice["logprobs"] = std::move(lp);
    choice["finish_reason"] = nullptr;
    if (chat_)
      choice["delta"] = {{"content", e.text}};
    else
      choice["text"] = e.text;
  }
  json c = envelope(json::array({std::move(choice)}), true);
  if (include_usage_) c["usage"] = nullptr;
  return sse(c);
}

std::vector<json> CompletionFormat::call_deltas(Choice& c, const std::string& text) const {
  std::vector<json> out;
  const std::vector<PartialCall> calls = tools_->partial_calls(text);
  for (size_t k = 0; k < calls.size(); ++k) {
    const PartialCall& p = calls[k];
    if (k == c.calls.size()) {
      if (p.name.empty()) break;  // its header waits for the whole name
      c.calls.emplace_back(new_call_id(), 0);
      out.push_back({{"index", k}, {"id", c.calls[k].first}, {"type", "function"},
                     {"function", {{"name", p.name}, {"arguments", ""}}}});
    }
    size_t& sent = c.calls[k].second;
    if (p.arguments.size() > sent) {
      out.push_back({{"index", k}, {"function", {{"arguments", p.arguments.substr(sent)}}}});
      sent = p.arguments.size();
    }
  }
  return out;
}

std::string CompletionFormat::stream_tool_event(const Event& e) {
  Choice& c = choices_.at(static_cast<size_t>(e.choice));
  auto chunk = [&](json delta, json lp, json finish) {
    json choice{{"index", e.choice}, {"delta", std::move(delta)}, {"logprobs", std::move(lp)}, {"finish_reason", std::move(finish)}};
    json ch = envelope(json::array({std::move(choice)}), true);
    if (include_usage_) ch["usage"] = nullptr;
    return ch;
  };
  if (e.kind == Event::Kind::Token) {
    c.text += e.text;
    json lp = nullptr;
    if (logprobs_ && e.token >= 0) {
      lp = empty_logprobs();
      append_logprob(lp, e);
    }
    if (calls_certain_) {  // the reply is calls: no content, the calls as they grow
      std::string out;
      for (json& d : call_deltas(c, c.text)) {
        out += sse(chunk({{"tool_calls", json::array({std::move(d)})}}, std::move(lp), nullptr));
        lp = nullptr;
      }
      if (out.empty() && !lp.is_null()) out = sse(chunk({{"content", ""}}, std::move(lp), nullptr));
      return out;
    }
    // Content goes out up to where a call may start, once it is more than white space.
    const size_t h = tools_->hold_from(c.text, false);
    std::string part;
    if (h > c.sent && !blank(c.text.substr(0, h))) {
      part = c.text.substr(c.sent, h - c.sent);
      c.sent = h;
    }
    if (part.empty() && lp.is_null()) return {};
    return sse(chunk({{"content", part}}, std::move(lp), nullptr));
  }
  const Reply r = reply(c.text, e.finish_reason);
  std::string out;
  if (calls_certain_) {
    // What the last tokens completed; a reply cut short (the token limit) ends with its call unfinished.
    for (json& d : call_deltas(c, c.text)) out += sse(chunk({{"tool_calls", json::array({std::move(d)})}}, nullptr, nullptr));
    json end = chunk(json::object(), nullptr, r.tool_calls.is_null() ? e.finish_reason : r.finish);
    if (r.tool_calls.is_null()) end["choices"][0]["tally_warning"] = "the reply ended inside a call: its arguments are incomplete";
    return out + sse(end);
  }
  if (r.content.is_string() && r.content.get_ref<const std::string&>().size() > c.sent)
    out += sse(chunk({{"content", r.content.get_ref<const std::string&>().substr(c.sent)}}, nullptr, nullptr));
  if (!r.tool_calls.is_null())
    for (size_t k = 0; k < r.tool_calls.size(); ++k) {
      const json& call = r.tool_calls[k];
      json head{{"index", k}, {"id", call["id"]}, {"type", "function"},
                {"function", {{"name", call["function"]["name"]}, {"arguments", ""}}}};
      out += sse(chunk({{"tool_calls", json::array({head})}}, nullptr, nullptr));
      json args{{"index", k}, {"function", {{"arguments", call["function"]["arguments"]}}}};
      out += sse(chunk({{"tool_calls", json::array({args})}}, nullptr, nullptr));
    }
  json end = chunk(json::object(), nullptr, r.finish);
  if (!r.warning.empty()) end["choices"][0]["tally_warning"] = r.warning;
  return out + sse(end);
}

std::string CompletionFormat::stream_end(const Job& job) const {
  std::string out;
  if (include_usage_) {
    json u = envelope(json::array(), true);
    u["usage"] = usage(job);
    out += sse(u);
  }
  return out + "data: [DONE]\n\n";
}

}  // namespace tally::server
