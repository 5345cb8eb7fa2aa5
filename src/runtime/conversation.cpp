#include "runtime/conversation.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/session_file.h"

namespace tally {

Conversation::Conversation(Session& session, const Tokenizer& tok, const ChatTemplate& tmpl, std::string system)
    : session_(session), tok_(tok), tmpl_(tmpl) {
  set_system(std::move(system));
}

void Conversation::set_system(std::string system) {
  const bool has = first_turn_ == 1;
  if (has && system.empty()) {
    messages_.erase(messages_.begin());
    stopped_.erase(stopped_.begin());
  } else if (has) {
    messages_.front().content = std::move(system);
  } else if (!system.empty()) {
    messages_.insert(messages_.begin(), {"system", std::move(system)});
    stopped_.insert(stopped_.begin(), false);
  }
  first_turn_ = !messages_.empty() && messages_.front().role == "system" ? 1 : 0;
}

void Conversation::clear() {
  messages_.resize(first_turn_);
  stopped_.resize(first_turn_);
}

std::vector<int32_t> Conversation::render_ids() const {
  return tmpl_.encode(tok_, messages_, true);
}

TurnResult Conversation::say(const std::string& user, const GenerateOptions& o,
                             const std::function<void(const std::string&)>& on_text) {
  const int64_t n_ctx = session_.n_ctx();
  const int64_t room = std::clamp<int64_t>(o.max_tokens, 1, std::max<int64_t>(1, n_ctx / 2));
  TurnResult r;
  const std::vector<ChatMessage> before = messages_;
  const std::vector<bool> stopped_before = stopped_;
  messages_.push_back({"user", user});
  stopped_.push_back(false);
  std::vector<int32_t> ids = render_ids();
  // Oldest user/assistant pairs go first; the new message always stays.
  while (static_cast<int64_t>(ids.size()) + room > n_ctx && messages_.size() >= first_turn_ + 3) {
    messages_.erase(messages_.begin() + static_cast<std::ptrdiff_t>(first_turn_),
                    messages_.begin() + static_cast<std::ptrdiff_t>(first_turn_ + 2));
    stopped_.erase(stopped_.begin() + static_cast<std::ptrdiff_t>(first_turn_),
                   stopped_.begin() + static_cast<std::ptrdiff_t>(first_turn_ + 2));
    ++r.dropped_turns;
    ids = render_ids();
  }
  if (static_cast<int64_t>(ids.size()) >= n_ctx) {
    const size_t n = ids.size();
    messages_ = before;
    stopped_ = stopped_before;
    fail("this message needs {} tokens with the chat template, and the context holds {} (send less, or use a larger context)", n,
         n_ctx);
  }
  r.reused = session_.reuse_prefix(ids);
  r.from_disk = session_.disk_tokens();
  r.prefilled = static_cast<int64_t>(ids.size()) - r.reused;
  r.generation = generate(
      session_, std::span<const int32_t>(ids).subspan(static_cast<size_t>(r.reused)), o,
      [&](const Emission& e) {
        if (on_text && !e.text.empty()) on_text(e.text);
      },
      &tok_);
  r.reply = r.generation.text;
  messages_.push_back({"assistant", r.reply});
  stopped_.push_back(r.generation.stop == Finish::Cancelled);
  return r;
}

void Conversation::save(const std::string& path) const {
  nlohmann::json j = nlohmann::json::array();
  for (size_t i = 0; i < messages_.size(); ++i) {
    nlohmann::json m{{"role", messages_[i].role}, {"content", messages_[i].content}};
    if (stopped_[i]) m["stopped"] = true;
    j.push_back(std::move(m));
  }
  session_.save(path, nlohmann::json{{"conversation", j}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void Conversation::load(const std::string& path) {
  // Checked before the session is touched: a file without a conversation leaves this one as it was.
  const SessionData d = read_session_file(path);
  std::vector<ChatMessage> msgs;
  std::vector<bool> stopped;
  try {
    const auto j = nlohmann::json::parse(d.header.meta);
    for (const auto& m : j.at("conversation")) {
      msgs.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
      stopped.push_back(m.value("stopped", false));
    }
  } catch (const nlohmann::json::exception&) {
    fail("{}: the session holds no chat conversation (saved by tally run?)", path);
  }
  session_.load(path);
  messages_ = std::move(msgs);
  stopped_ = std::move(stopped);
  first_turn_ = !messages_.empty() && messages_.front().role == "system" ? 1 : 0;
}

}  // namespace tally
