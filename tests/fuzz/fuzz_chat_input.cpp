// libFuzzer target for what a line typed into `tally chat` means
// (tools/tally/chat_input.h). Input: the first byte picks the message limit
// (16 to 4096 bytes), the rest is lines separated by '\n', fed in order.
// Properties, per line: a line that starts with '/' outside a """ block is
// never a message ("//" aside, which sends the rest); a message is never
// blank, never over the limit, and outside a block is the line itself; a
// refusal is one line of at most 1 KiB without control characters; /set
// values lie in their setting's range; the block state follows the """ lines.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "chat_input.h"
#include "fuzz_checks.h"

namespace {

using tally::cli::ChatAction;
using tally::cli::ChatInput;
using tally::cli::ChatSetting;

constexpr const char* kTarget = "fuzz_chat_input";
constexpr std::string_view kQuotes = "\"\"\"";

void check_set(const ChatAction& a, const std::string& line) {
  const double v = a.value;
  auto within = [&](double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; };
  bool ok = true;
  switch (a.setting) {
    case ChatSetting::None: ok = v == 0; break;
    case ChatSetting::Temperature: ok = within(0, 100); break;
    case ChatSetting::TopP: ok = within(0, 1) && v > 0; break;
    case ChatSetting::TopK: ok = within(0, 2147483647) && v == std::floor(v); break;
    case ChatSetting::MinP: ok = within(0, 1) && v < 1; break;
    case ChatSetting::Seed: ok = within(-1, 9007199254740992.0) && v == std::floor(v); break;
    case ChatSetting::MaxTokens: ok = within(1, 1 << 24) && v == std::floor(v); break;
  }
  if (!ok) tally_fuzz::violated(kTarget, "/set value outside its range", line);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 65536) return 0;
  const size_t max = 16 + data[0] * 16;
  ChatInput in(max);
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  while (true) {
    const size_t nl = rest.find('\n');
    const std::string line(rest.substr(0, nl));
    const bool was_in_block = in.in_block();
    const ChatAction a = in.feed(line);
    std::string_view typed = line;
    if (!typed.empty() && typed.back() == '\r') typed.remove_suffix(1);
    switch (a.kind) {
      case ChatAction::Kind::Message: {
        if (a.text.empty() || a.text.find_first_not_of(" \t\r\n\f\v") == std::string::npos)
          tally_fuzz::violated(kTarget, "a blank message", line);
        if (a.text.size() > max) tally_fuzz::violated(kTarget, "a message over the limit", line);
        if (!was_in_block && typed.substr(0, 3) != kQuotes) {
          const bool slashes = typed.substr(0, 2) == "//";
          if (!typed.empty() && typed[0] == '/' && !slashes)
            tally_fuzz::violated(kTarget, "a line starting with / sent as a message", line);
          if (a.text != (slashes ? typed.substr(1) : typed))
            tally_fuzz::violated(kTarget, "a message that is not the line typed", line);
        }
        if (in.in_block()) tally_fuzz::violated(kTarget, "still in a block after its message", line);
        break;
      }
      case ChatAction::Kind::Refused: {
        if (a.text.empty() || a.text.size() > 1024) tally_fuzz::violated(kTarget, "a refusal's length", a.text);
        for (char c : a.text)
          if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            tally_fuzz::violated(kTarget, "a control character in a refusal", a.text);
        break;
      }
      case ChatAction::Kind::Command:
        if (was_in_block) tally_fuzz::violated(kTarget, "a command inside a block", line);
        if (a.command == tally::cli::ChatCommand::Set) check_set(a, line);
        if ((a.command == tally::cli::ChatCommand::Save || a.command == tally::cli::ChatCommand::Load) && a.text.empty())
          tally_fuzz::violated(kTarget, "/save or /load without a file", line);
        break;
      case ChatAction::Kind::Nothing: break;
    }
    // The block state follows the """ lines: a block opens at a line that
    // starts with them (unless the same line closes it) and closes at a line
    // that ends with them.
    const bool opens = typed.substr(0, 3) == kQuotes &&
                       !(typed.size() >= 6 && typed.substr(typed.size() - 3) == kQuotes);
    const bool closes = typed.size() >= 3 && typed.substr(typed.size() - 3) == kQuotes;
    if (in.in_block() != (was_in_block ? !closes : opens)) tally_fuzz::violated(kTarget, "the block state", line);
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  return 0;
}
