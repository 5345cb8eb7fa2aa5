// The chat over one session (runtime/conversation.h) on the real model: a
// second turn reuses the cached first turn; when the context fills, the
// oldest turns are dropped and the chat goes on; a message that cannot fit
// at all is refused and leaves the conversation as it was.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model_test_support.h"
#include "runtime/conversation.h"
#include "tokenizer/chat_template.h"

namespace tally {
namespace {

using tally_test::shared_model;
using tally_test::shared_tokenizer;

GenerateOptions greedy(int64_t max_tokens) {
  GenerateOptions g;
  g.max_tokens = max_tokens;
  g.sampling.temperature = 0;
  const Tokenizer& tok = shared_tokenizer();
  g.is_stop = [&tok](int32_t id) { return tok.is_end_of_generation(id); };
  return g;
}

TEST(ModelConversation, SecondTurnReusesTheFirst) {
  TALLY_NEED_MODEL();
  SessionOptions o;
  o.n_ctx = 512;
  Session s(*shared_model(), o);
  const ChatTemplate tmpl = ChatTemplate::from_gguf(shared_model()->file());
  Conversation chat(s, shared_tokenizer(), tmpl, "You are brief.");
  const TurnResult a = chat.say("What is the capital of France?", greedy(16), {});
  EXPECT_EQ(a.reused, 0);
  EXPECT_FALSE(a.reply.empty());
  const int64_t after_first = s.length();
  const TurnResult b = chat.say("And of Italy?", greedy(16), {});
  // Everything but the tail of the first reply's last token is taken from the cache.
  EXPECT_GE(b.reused, after_first - 2);
  EXPECT_EQ(b.dropped_turns, 0);
  ASSERT_EQ(chat.messages().size(), 5u);  // system, user, assistant, user, assistant
  EXPECT_EQ(chat.messages()[3].content, "And of Italy?");
  EXPECT_EQ(chat.messages()[4].content, b.reply);
  // The session holds exactly the rendered conversation so far plus the reply.
  EXPECT_GT(s.length(), after_first);
}

TEST(ModelConversation, FullContextDropsOldestTurnsAndGoesOn) {
  TALLY_NEED_MODEL();
  SessionOptions o;
  o.n_ctx = 160;
  Session s(*shared_model(), o);
  const ChatTemplate tmpl = ChatTemplate::from_gguf(shared_model()->file());
  Conversation chat(s, shared_tokenizer(), tmpl, "You are brief.");
  int64_t dropped = 0;
  for (int turn = 0; turn < 6; ++turn) {
    const TurnResult r = chat.say("Tell me one more fact about the sea, turn " + std::to_string(turn) + ".",
                                  greedy(40), {});
    dropped += r.dropped_turns;
    EXPECT_LE(s.length(), s.n_ctx());
    EXPECT_EQ(chat.messages().front().role, "system");  // the system message always stays
  }
  EXPECT_GT(dropped, 0) << "six turns of up to 40 tokens cannot fit in 160 without dropping";

  // A message longer than the context is refused; the conversation is unchanged and still works.
  const auto before = chat.messages();
  std::string huge;
  for (int i = 0; i < 200; ++i) huge += "word ";
  try {
    chat.say(huge, greedy(8), {});
    ADD_FAILURE() << "a message longer than the context was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context holds 160"), std::string::npos) << e.what();
  }
  EXPECT_EQ(chat.messages().size(), before.size());
  const TurnResult r = chat.say("Thanks.", greedy(8), {});
  EXPECT_EQ(chat.messages().back().content, r.reply);
}

}  // namespace
}  // namespace tally
