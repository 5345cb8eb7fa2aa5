#pragma once
// A generation job's events (server/job.h) in OpenAI's JSON, for both
// endpoints and both ways of answering: chat completions and text
// completions, whole (events accumulated into choices) or streamed (one
// server-sent event per token and per choice's end). One place decides each
// shape, so the streamed and the whole answer cannot drift apart.
//   chat:       choice {index, message{role, content} | delta{...}, logprobs{content: [...]}, finish_reason}
//   completion: choice {index, text, logprobs{tokens, token_logprobs, top_logprobs}, finish_reason}
// Invariant: the concatenated stream deltas of a choice equal the whole
// answer's content, and its logprobs the same entries in the same order.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/job.h"
#include "tokenizer/tokenizer.h"

namespace tally::server {

class CompletionFormat {
 public:
  CompletionFormat(bool chat, const Tokenizer& tok, std::string id, std::string model, bool logprobs, int n,
                   bool include_usage);

  // Whole answers: add every event, then the response object.
  void add(const Event& e);
  nlohmann::json whole(const Job& job) const;

  // Streams: the "data: ...\n\n" lines, in order.
  std::string stream_start() const;  // chat: each choice's role delta; completions: nothing
  std::string stream_event(const Event& e) const;
  std::string stream_end(const Job& job) const;  // the usage chunk if asked, then [DONE]

  static nlohmann::json usage(const Job& job);

 private:
  struct Choice {
    std::string text, finish;
    nlohmann::json logprobs;  // the endpoint's logprobs object, grown per token
  };
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
};

}  // namespace tally::server
