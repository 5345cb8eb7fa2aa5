#include "tokenizer/chat_template.h"

#include "core/error.h"
#include "io/gguf.h"
#include "core/utf8.h"

namespace tally {
namespace {

bool contains(std::string_view hay, std::string_view needle) {
  return hay.find(needle) != std::string_view::npos;
}

// Undoes the escapes of a Jinja string literal that occur in templates.
std::string unescape_literal(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      default: out.push_back(c); break;  // \' \" \\ and anything else: the character itself
    }
  }
  return out;
}

// The default system message of a ChatML template that inserts one when the
// conversation does not start with a system turn, or "" if it does not.
std::string find_default_system(std::string_view t) {
  const bool conditional = contains(t, "messages[0]['role'] != 'system'") ||
                           contains(t, "messages[0][\"role\"] != \"system\"") ||
                           contains(t, "messages[0].role != 'system'") ||
                           contains(t, "messages[0].role != \"system\"");
  if (!conditional) return {};
  // The system turn is a literal: "<|im_start|>system" + newline (real or
  // escaped) + message + "<|im_end|>".
  for (std::string_view head : {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    const size_t b = t.find(head);
    if (b == std::string_view::npos) continue;
    const size_t start = b + head.size();
    const size_t e = t.find("<|im_end|>", start);
    if (e == std::string_view::npos) continue;
    const std::string_view body = t.substr(start, e - start);
    // Only a plain literal qualifies: an expression (e.g. a variable) would
    // need a Jinja engine.
    if (contains(body, "{{") || contains(body, "{%") || contains(body, "' +") ||
        contains(body, "+ '"))
      return {};
    return unescape_literal(body);
  }
  return {};
}

}  // namespace

ChatTemplate ChatTemplate::from_gguf(const GgufFile& f) {
  if (!f.has("tokenizer.chat_template")) {
    // Gemma 3 base files carry none; HF ships the same template for base and instruct.
    if (f.has("general.architecture") && f.get_string("general.architecture") == "gemma3") {
      ChatTemplate t;
      t.family_ = "gemma";
      return t;
    }
    fail("{}: no chat template in this file (missing tokenizer.chat_template)", f.path());
  }
  return from_source(f.get_string("tokenizer.chat_template"), f.path());
}

ChatTemplate ChatTemplate::from_source(std::string_view source, std::string_view origin) {
  ChatTemplate t;
  if (contains(source, "<|im_start|>") && contains(source, "<|im_end|>")) {
    t.default_system_ = find_default_system(source);
    t.family_ = t.default_system_.empty() ? "chatml" : "chatml-default-system";
    return t;
  }
  if (contains(source, "<start_of_turn>") && contains(source, "<end_of_turn>")) {
    t.family_ = "gemma";
    return t;
  }
  // Quote whole UTF-8 characters only, and show newlines as \n.
  std::string_view head = source.substr(0, 60);
  head = head.substr(0, utf8::complete_prefix(head));
  std::string quoted;
  for (char c : utf8::sanitize(head)) {
    if (c == '\n')
      quoted += "\\n";
    else
      quoted.push_back(c);
  }
  fail("{}: unsupported chat template (tokenizer.chat_template begins \"{}{}\"); supported "
       "families: chatml, chatml-default-system, gemma",
       origin, quoted, source.size() > 60 ? "..." : "");
}

std::string ChatTemplate::render(std::span<const ChatMessage> msgs,
                                 bool add_generation_prompt) const {
  std::string out;
  if (family_ == "gemma") {
    auto trim = [](std::string_view s) {
      const size_t b = s.find_first_not_of(" \t\n\r");
      return b == std::string_view::npos ? std::string_view() : s.substr(b, s.find_last_not_of(" \t\n\r") - b + 1);
    };
    size_t first = 0;
    std::string prefix;  // the system message, before the first turn's content
    if (!msgs.empty() && msgs[0].role == "system") {
      prefix = msgs[0].content + "\n\n";
      first = 1;
    }
    for (size_t i = first; i < msgs.size(); ++i) {
      out.append("<start_of_turn>").append(msgs[i].role == "assistant" ? "model" : msgs[i].role).append("\n");
      if (i == first) out.append(prefix);
      out.append(trim(msgs[i].content)).append("<end_of_turn>\n");
    }
    if (add_generation_prompt) out.append("<start_of_turn>model\n");
    return out;
  }
  auto turn = [&out](std::string_view role, std::string_view content) {
    out.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
  };
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0 && !default_system_.empty() && msgs[0].role != "system")
      turn("system", default_system_);
    turn(msgs[i].role, msgs[i].content);
  }
  if (add_generation_prompt) out.append("<|im_start|>assistant\n");
  return out;
}

}  // namespace tally
