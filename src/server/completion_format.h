#pragma once
// A generation job's events (server/job.h) in OpenAI's JSON, for both
// endpoints and both ways of answering: chat completions and text
// completions, whole (events accumulated into choices) or streamed (one
// server-sent event per token and per choice's end). One place decides each
// shape, so the streamed and the whole answer cannot drift apart.
//   chat:       choice {index, message{role, content} | delta{...}, logprobs{content: [...]}, finish_reason}
//   completion: choice {index, text, logprobs{tokens, token_logprobs, top_logprobs}, finish_reason}
// With tools, a chat reply is split into content and tool calls
// (server/tool_calls.h): streamed, the content goes out as it comes up to
// where a call may start; the rest is held to the choice's end, then sent as
// content and as each call's header (index, id, type, name) followed by its
// arguments. When a grammar makes the reply calls (`calls_certain`:
// tool_choice "required" or a named function), nothing can turn out to be
// content, so each call's header goes out once its name is written and its
// arguments token by token, as the model writes them. A choice that ends on
// its own with calls finishes "tool_calls"; text that looked like a call but
// is not one comes with "tally_warning".
// Invariant: the concatenated stream deltas of a choice equal the whole
// answer's content (and its tool calls: ids aside, arguments as JSON values,
// streamed as written and compacted whole), and its logprobs the same
// entries in the same order.
#include <cstdint>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/job.h"
#include "tokenizer/tokenizer.h"

namespace tally::server {

class CompletionFormat {
 public:
  CompletionFormat(bool chat, const Tokenizer& tok, std::string id, std::string model, bool logprobs, int n,
                   bool include_usage, std::optional<ToolCallParser> tools = std::nullopt,
                   bool calls_certain = false);

  // Whole answers: add every event, then the response object.
  void add(const Event& e);
  nlohmann::json whole(const Job& job) const;

  // Streams: the "data: ...\n\n" lines, in order.
  std::string stream_start() const;  // chat: each choice's role delta; completions: nothing
  std::string stream_event(const Event& e);
  std::string stream_tool_event(const Event& e);
  std::string stream_end(const Job& job) const;  // the usage chunk if asked, then [DONE]

  static nlohmann::json usage(const Job& job);

 private:
  struct Choice {
    std::string text, finish;
    nlohmann::json logprobs;  // the endpoint's logprobs object, grown per token
    size_t sent = 0;          // streamed with tools: the bytes of text sent as content
    // Streamed calls (calls_certain): each one's id and the bytes of its arguments sent.
    std::vector<std::pair<std::string, size_t>> calls;
  };
  // A choice's end with tools: its content, calls, finish reason and warning.
  struct Reply {
    nlohmann::json content;     // null when there is no text
    nlohmann::json tool_calls;  // null when none
    std::string finish, warning;
  };
  Reply reply(const std::string& text, const std::string& finish) const;
  // calls_certain: the deltas that bring a choice's streamed calls up to `text`.
  std::vector<nlohmann::json> call_deltas(Choice& c, const std::string& text) const;
  static nlohmann::json call_json(const ToolCall& c);
  nlohmann::json empty_logprobs() const;
  void append_logprob(nlohmann::json& lp, const Event& e) const;
  nlohmann::json envelope(nlohmann::json choices, bool chunk) const;
  std::string sse(const nlohmann::json& j) const;

  bool chat_;
  const Tokenizer& tok_;
  std::string id_, model_;
  bool logprobs_, include_usage_;
  int64_t created_;
  std::vector<Choice> choices_;
  std::optional<ToolCallParser> tools_;
  bool calls_certain_;
};

}  // namespace tally::server
