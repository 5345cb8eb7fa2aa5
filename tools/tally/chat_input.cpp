#include "chat_input.h"

#include <fmt/format.h>

#include <cstdint>

#include "core/byte_size.h"
#include "core/number_text.h"
#include "core/printable.h"
#include "suggest.h"

namespace tally::cli {
namespace {

constexpr std::string_view kQuotes = "\"\"\"";

struct CommandName {
  const char* name;
  ChatCommand command;
  bool takes_text;  // the rest of the line is its argument
};
constexpr CommandName kCommands[] = {
    {"/help", ChatCommand::Help, false},   {"/?", ChatCommand::Help, false},     {"/bye", ChatCommand::Bye, false},
    {"/exit", ChatCommand::Bye, false},    {"/clear", ChatCommand::Clear, false}, {"/system", ChatCommand::System, true},
    {"/set", ChatCommand::Set, true},      {"/save", ChatCommand::Save, true},   {"/load", ChatCommand::Load, true},
    {"/stats", ChatCommand::Stats, false},
};

struct SettingName {
  const char* name;
  ChatSetting setting;
  double min, max;
  bool whole;
  bool min_open;  // the minimum itself is not allowed
  bool max_open;
};
constexpr SettingName kSettings[] = {
    {"temp", ChatSetting::Temperature, 0, 100, false, false, false},
    {"top_p", ChatSetting::TopP, 0, 1, false, true, false},
    {"top_k", ChatSetting::TopK, 0, INT32_MAX, true, false, false},
    {"min_p", ChatSetting::MinP, 0, 1, false, false, true},
    {"seed", ChatSetting::Seed, -1, 9007199254740992.0, true, false, false},  // 2^53: exact in a double
    {"max_tokens", ChatSetting::MaxTokens, 1, 1 << 24, true, false, false},
};

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos; }

std::string shown(std::string_view s) { return excerpt(s, 64); }

ChatAction refused(std::string text) {
  ChatAction a;
  a.kind = ChatAction::Kind::Refused;
  PrintableOptions o;
  o.max_bytes = 1000;
  o.escape_quotes = false;
  a.text = printable(text, o);
  return a;
}

ChatAction message(std::string text) {
  ChatAction a;
  a.kind = ChatAction::Kind::Message;
  a.text = std::move(text);
  return a;
}

std::string command_list() {
  return "/help, /bye, /clear, /system, /set, /save, /load, /stats";
}

ChatAction parse_set(std::string_view arg) {
  ChatAction a;
  a.kind = ChatAction::Kind::Command;
  a.command = ChatCommand::Set;
  arg = trim(arg);
  if (arg.empty()) return a;  // show the settings
  const size_t sp = arg.find_first_of(" \t");
  const std::string_view name = arg.substr(0, sp);
  const std::string_view value = sp == std::string_view::npos ? std::string_view() : trim(arg.substr(sp));
  const SettingName* s = nullptr;
  std::vector<std::string> names;
  for (const SettingName& k : kSettings) {
    names.emplace_back(k.name);
    // top-p as well as top_p; "temperature" as llama.cpp's users say it.
    std::string alt(k.name);
    for (char& c : alt) c = c == '_' ? '-' : c;
    if (name == k.name || name == alt || (k.setting == ChatSetting::Temperature && name == "temperature")) s = &k;
  }
  if (s == nullptr) {
    const std::string guess = closest(name, names);
    return refused(fmt::format("/set: unknown setting '{}'{} (settings: {})", shown(name),
                               guess.empty() ? "" : fmt::format(" (did you mean {}?)", guess), ChatInput::settings_help()));
  }
  if (value.empty()) return refused(fmt::format("/set {} needs a value: /set {} VALUE", s->name, s->name));
  std::string err;
  double v = 0;
  if (s->whole) {
    err = integer_error("", value, static_cast<int64_t>(s->min), static_cast<int64_t>(s->max));
    if (err.empty()) v = static_cast<double>(*parse_integer(value));
  } else {
    err = real_error("", value, s->min, s->max);
    if (err.empty()) v = *parse_real(value);
    if (err.empty() && ((s->min_open && v <= s->min) || (s->max_open && v >= s->max)))
      err = fmt::format(" {} must be {} {:g}", v, s->min_open ? "above" : "below", s->min_open ? s->min : s->max);
  }
  if (!err.empty()) return refused(fmt::format("/set {}:{}", s->name, err));
  a.setting = s->setting;
  a.value = v;
  return a;
}

}  // namespace

std::string ChatInput::help() {
  return "Commands:\n"
         "  /help, /?          this help\n"
         "  /bye, /exit        leave the chat (so do Ctrl-D and Ctrl-C at an empty prompt)\n"
         "  /clear             forget the conversation (the system message stays)\n"
         "  /system [TEXT]     set the system message (the turns so far stay); without TEXT, show it\n"
         "  /set [NAME VALUE]  change a sampling setting; without one, show them all:\n"
         "                     " + settings_help() + "\n"
         "  /save FILE         save the conversation with its KV cache\n"
         "  /load FILE         continue a saved conversation\n"
         "  /stats             the context, the cache and the speed of the last reply\n"
         "Text between two lines of \"\"\" is one message of several lines; a message that starts with / is\n"
         "written //. Ctrl-C stops a reply (what it wrote so far stays in the conversation, marked stopped).";
}

std::string ChatInput::settings_help() {
  return "temp 0-100, top_p (0-1], top_k >= 0 (0: off), min_p [0-1), seed (-1: random), max_tokens >= 1";
}

const char* ChatInput::setting_name(ChatSetting s) {
  for (const SettingName& k : kSettings)
    if (k.setting == s) return k.name;
  return "";
}

void ChatInput::reset() {
  in_block_ = false;
  block_too_long_ = false;
  block_lines_ = 0;
  block_.clear();
}

ChatAction ChatInput::too_long() const {
  return refused(fmt::format("the message is longer than {}, the most one message may hold; it was not sent",
                             format_bytes_short(max_bytes_)));
}

ChatAction ChatInput::finish_block() {
  const bool is_too_long = block_too_long_;
  std::string text = std::move(block_);
  reset();
  if (is_too_long) return too_long();
  if (blank(text)) return {};
  return message(std::move(text));
}

// Appends one line of a """ block (with the newline before it), or marks the block too long.
void ChatInput::add_to_block(std::string_view part) {
  if (block_too_long_) return;
  const size_t grown = block_.size() + (block_lines_ > 0 ? 1 : 0) + part.size();
  if (grown > max_bytes_) {
    block_too_long_ = true;
    block_.clear();
    return;
  }
  if (block_lines_ > 0) block_ += '\n';
  block_ += part;
  ++block_lines_;
}

ChatAction ChatInput::feed(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // a line from a file with CRLF endings
  auto ends_quoted = [](std::string_view s) {
    return s.size() >= kQuotes.size() && s.substr(s.size() - kQuotes.size()) == kQuotes;
  };
  if (in_block_) {
    const bool last = ends_quoted(line);
    const std::string_view part = last ? line.substr(0, line.size() - kQuotes.size()) : line;
    if (!last || !part.empty()) add_to_block(part);
    return last ? finish_block() : ChatAction{};
  }
  if (line.substr(0, kQuotes.size()) == kQuotes) {
    const std::string_view rest = line.substr(kQuotes.size());
    if (ends_quoted(rest)) {  // """text""" on one line: one message
      const std::string_view inner = rest.substr(0, rest.size() - kQuotes.size());
      if (inner.size() > max_bytes_) return too_long();
      if (blank(inner)) return {};
      return message(std::string(inner));
    }
    // """ alone, or """text: a block, up to a line that ends with """.
    in_block_ = true;
    if (!rest.empty()) add_to_block(rest);
    return {};
  }
  if (line.size() > max_bytes_) return too_long();
  if (blank(line)) return {};
  if (line.substr(0, 2) == "//") return message(std::string(line.substr(1)));
  if (line.front() == '/') return command(line);
  return message(std::string(line));
}

ChatAction ChatInput::command(std::string_view line) {
  const size_t sp = line.find_first_of(" \t");
  const std::string_view name = line.substr(0, sp);
  const std::string_view arg = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1);
  for (const CommandName& c : kCommands) {
    if (name != c.name) continue;
    if (!c.takes_text && !trim(arg).empty())
      return refused(fmt::format("{} takes nothing after it, got '{}'", c.name, shown(trim(arg))));
    if (c.command == ChatCommand::Set) return parse_set(arg);
    ChatAction a;
    a.kind = ChatAction::Kind::Command;
    a.command = c.command;
    a.text = std::string(trim(arg));
    if ((c.command == ChatCommand::Save || c.command == ChatCommand::Load) && a.text.empty())
      return refused(fmt::format("{} needs a file: {} FILE", c.name, c.name));
    return a;
  }
  std::vector<std::string> names;
  for (const CommandName& c : kCommands) names.emplace_back(c.name);
  const std::string guess = closest(name, names);
  return refused(fmt::format("unknown command '{}'{}; it was not sent (commands: {}; a message that starts with / is "
                             "written //)",
                             shown(name), guess.empty() ? "" : fmt::format(" (did you mean {}?)", guess), command_list()));
}

}  // namespace tally::cli
