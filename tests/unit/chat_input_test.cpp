// What a line typed into `tally chat` means (tools/tally/chat_input.h):
// messages, commands, refusals, """ blocks, /set's strict values.
#include "chat_input.h"

#include <gtest/gtest.h>

#include <string>

namespace tally::cli {
namespace {

using Kind = ChatAction::Kind;

ChatAction one(const std::string& line, size_t max = 1 << 20) {
  ChatInput in(max);
  return in.feed(line);
}

TEST(ChatInput, TextIsAMessageAsTyped) {
  const ChatAction a = one("  What is a KV cache?  ");
  EXPECT_EQ(a.kind, Kind::Message);
  EXPECT_EQ(a.text, "  What is a KV cache?  ");
  EXPECT_EQ(one("").kind, Kind::Nothing);
  EXPECT_EQ(one(" \t ").kind, Kind::Nothing);
  EXPECT_EQ(one("hi\r").text, "hi");  // a CRLF file's line
}

TEST(ChatInput, CommandsAreNeverSent) {
  EXPECT_EQ(one("/help").command, ChatCommand::Help);
  EXPECT_EQ(one("/?").command, ChatCommand::Help);
  EXPECT_EQ(one("/bye").command, ChatCommand::Bye);
  EXPECT_EQ(one("/exit").command, ChatCommand::Bye);
  EXPECT_EQ(one("/clear").command, ChatCommand::Clear);
  EXPECT_EQ(one("/stats").command, ChatCommand::Stats);
  const ChatAction sys = one("/system   Answer in French. ");
  EXPECT_EQ(sys.kind, Kind::Command);
  EXPECT_EQ(sys.command, ChatCommand::System);
  EXPECT_EQ(sys.text, "Answer in French.");
  EXPECT_EQ(one("/system").text, "");  // show it
  const ChatAction save = one("/save my chat.tks");
  EXPECT_EQ(save.command, ChatCommand::Save);
  EXPECT_EQ(save.text, "my chat.tks");  // a path may hold spaces
  EXPECT_EQ(one("/load x").command, ChatCommand::Load);
}

TEST(ChatInput, UnknownAndMalformedCommandsAreRefusedWithAGuess) {
  ChatAction a = one("/sav file");
  EXPECT_EQ(a.kind, Kind::Refused);
  EXPECT_NE(a.text.find("unknown command '/sav' (did you mean /save?)"), std::string::npos) << a.text;
  a = one("/usr/bin is where?");
  EXPECT_EQ(a.kind, Kind::Refused);
  EXPECT_NE(a.text.find("written //"), std::string::npos) << a.text;
  EXPECT_EQ(one("//usr/bin is where?").text, "/usr/bin is where?");
  EXPECT_EQ(one("/save").kind, Kind::Refused);
  EXPECT_EQ(one("/save").text, "/save needs a file: /save FILE");
  EXPECT_EQ(one("/load   ").text, "/load needs a file: /load FILE");
  EXPECT_EQ(one("/bye now").kind, Kind::Refused);
  // Control characters in what is quoted back are escaped: one line.
  a = one("/\x1b[2Jx");
  EXPECT_EQ(a.kind, Kind::Refused);
  EXPECT_EQ(a.text.find('\x1b'), std::string::npos) << a.text;
}

TEST(ChatInput, SetTakesStrictValuesInRange) {
  ChatAction a = one("/set temp 0.7");
  EXPECT_EQ(a.kind, Kind::Command);
  EXPECT_EQ(a.setting, ChatSetting::Temperature);
  EXPECT_DOUBLE_EQ(a.value, 0.7);
  EXPECT_EQ(one("/set temperature 1").setting, ChatSetting::Temperature);
  EXPECT_EQ(one("/set top-p 0.9").setting, ChatSetting::TopP);
  EXPECT_EQ(one("/set top_k 0").value, 0);
  EXPECT_EQ(one("/set seed -1").value, -1);
  EXPECT_EQ(one("/set max_tokens 64").setting, ChatSetting::MaxTokens);
  EXPECT_EQ(one("/set").setting, ChatSetting::None);  // show them
  for (const char* bad : {"/set temp -1", "/set temp inf", "/set temp 0x1", "/set top_p 0", "/set top_p 1.5",
                          "/set min_p 1", "/set top_k 2.5", "/set top_k 3000000000", "/set seed -2",
                          "/set max_tokens 0", "/set temp", "/set tmp 1"})
    EXPECT_EQ(one(bad).kind, Kind::Refused) << bad;
  EXPECT_NE(one("/set top_p 0").text.find("/set top_p: 0 must be above 0"), std::string::npos);
  EXPECT_NE(one("/set tmp 1").text.find("did you mean temp?"), std::string::npos);
}

TEST(ChatInput, QuotedBlocksAreOneMessage) {
  ChatInput in(1 << 20);
  EXPECT_EQ(in.feed("\"\"\"").kind, Kind::Nothing);
  EXPECT_TRUE(in.in_block());
  EXPECT_EQ(in.feed("first line").kind, Kind::Nothing);
  EXPECT_EQ(in.feed("/bye").kind, Kind::Nothing);  // text inside a block
  EXPECT_EQ(in.feed("").kind, Kind::Nothing);
  const ChatAction a = in.feed("last\"\"\"");
  EXPECT_EQ(a.kind, Kind::Message);
  EXPECT_EQ(a.text, "first line\n/bye\n\nlast");
  EXPECT_FALSE(in.in_block());
  EXPECT_EQ(in.feed("\"\"\"one line\"\"\"").text, "one line");
  EXPECT_EQ(in.feed("\"\"\"opening").kind, Kind::Nothing);
  EXPECT_EQ(in.feed("\"\"\"").text, "opening");
  EXPECT_EQ(in.feed("\"\"\"").kind, Kind::Nothing);
  EXPECT_EQ(in.feed("\"\"\"").kind, Kind::Nothing);  // an empty block sends nothing
  in.feed("\"\"\"");
  in.feed("dropped");
  in.reset();  // Ctrl-C
  EXPECT_FALSE(in.in_block());
  EXPECT_EQ(in.feed("next").text, "next");
}

TEST(ChatInput, AMessageOverTheLimitIsRefusedWhole) {
  EXPECT_EQ(one(std::string(100, 'x'), 100).kind, Kind::Message);
  const ChatAction a = one(std::string(101, 'x'), 100);
  EXPECT_EQ(a.kind, Kind::Refused);
  EXPECT_NE(a.text.find("longer than 100 B"), std::string::npos) << a.text;
  ChatInput in(100);
  in.feed("\"\"\"");
  in.feed(std::string(60, 'a'));
  in.feed(std::string(60, 'b'));  // 121 bytes with the newline
  EXPECT_EQ(in.feed("\"\"\"").kind, Kind::Refused);
  EXPECT_FALSE(in.in_block());
}

}  // namespace
}  // namespace tally::cli
