#pragma once
// A multi-turn chat over one Session. Each turn renders the whole
// conversation with the model's chat template and prefills only what the
// cache does not already hold (Session::reuse_prefix): earlier turns cost
// nothing again. Invariants: the messages alternate user / assistant after an
// optional system message; the session's tokens are a prefix of the last
// rendering. When a turn's prompt would leave less than `reply_room` tokens
// of context, the oldest user/assistant pairs are dropped (the system message
// stays) until it fits; a turn that cannot fit even alone is refused with a
// tally::Error and the conversation is left as it was, still usable. A reply
// whose generation was cancelled stays in the conversation as far as it got,
// marked stopped (stopped(i)); the model sees it as it is.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/generator.h"
#include "runtime/session.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tally {

struct TurnResult {
  GenerateResult generation;
  std::string reply;          // the decoded reply (also appended to the conversation)
  int64_t reused = 0;         // prompt tokens taken from the cache
  int64_t from_disk = 0;      // of those, loaded from its disk tier
  int64_t prefilled = 0;      // prompt tokens evaluated
  int64_t dropped_turns = 0;  // oldest user/assistant pairs dropped to make room
};

class Conversation {
 public:
  // system: the system message, "" for the template's default.
  Conversation(Session& session, const Tokenizer& tok, const ChatTemplate& tmpl, std::string system);

  // Sends a user message and generates the reply; on_text sees each decoded
  // piece as soon as it is complete UTF-8. The reply's room in the context
  // (reply_room above) is o.max_tokens, at most half the context.
  TurnResult say(const std::string& user, const GenerateOptions& o, const std::function<void(const std::string&)>& on_text);

  const std::vector<ChatMessage>& messages() const { return messages_; }
  // Message i is a reply cut short by a cancel (GenerateOptions::cancel).
  bool stopped(size_t i) const { return i < stopped_.size() && stopped_[i]; }

  // Replaces the system message ("" removes it; the template's default then
  // applies); the turns stay, and the next turn renders them after it.
  void set_system(std::string system);
  // Forgets every turn; the system message stays.
  void clear();

  // Saves the session with the messages (as JSON meta) to `path`; load()
  // restores both, so the next turn prefills only itself.
  void save(const std::string& path) const;
  void load(const std::string& path);

 private:
  std::vector<int32_t> render_ids() const;

  Session& session_;
  const Tokenizer& tok_;
  const ChatTemplate& tmpl_;
  std::vector<ChatMessage> messages_;
  std::vector<bool> stopped_;  // parallel to messages_
  size_t first_turn_ = 0;  // index of the first user message (after the system message)
};

}  // namespace tally
