// The chat over one session (runtime/conversation.h) on the real model: a
// second turn reuses the cached first turn; when the context fills, the
// oldest turns are dropped and the chat goes on; a message that cannot fit
// at all is refused and leaves the conversation as it was.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "core/error.h"
#include "model_test_support.h"
#include "test_util.h"
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

namespace tally {
namespace {

TEST(ModelConversation, ACancelledReplyIsKeptMarkedAndSavedSo) {
  TALLY_NEED_MODEL();
  SessionOptions o;
  o.n_ctx = 512;
  Session s(*shared_model(), o);
  const ChatTemplate tmpl = ChatTemplate::from_gguf(shared_model()->file());
  Conversation chat(s, shared_tokenizer(), tmpl, "You are brief.");
  // Cancelled once the reply has its third piece of text, as Ctrl-C would.
  std::atomic<bool> cancel{false};
  GenerateOptions g = greedy(64);
  g.cancel = &cancel;
  int pieces = 0;
  const TurnResult r = chat.say("Tell me a long story about the sea.", g, [&](const std::string&) {
    if (++pieces == 3) cancel = true;
  });
  EXPECT_EQ(r.generation.stop, Finish::Cancelled);
  // It stops right after the token that made the third piece (a token may make no text of its own).
  EXPECT_GE(r.generation.tokens.size(), 3u);
  EXPECT_LT(r.generation.tokens.size(), 10u);
  ASSERT_EQ(chat.messages().size(), 3u);
  EXPECT_EQ(chat.messages()[2].content, r.reply);
  EXPECT_TRUE(chat.stopped(2));
  EXPECT_FALSE(chat.stopped(1));
  // The next turn goes on after the partial reply.
  cancel = false;
  const TurnResult next = chat.say("Go on.", greedy(4), {});
  EXPECT_NE(next.generation.stop, Finish::Cancelled);
  EXPECT_FALSE(chat.stopped(4));
  // Saved and loaded, the mark stays with its message.
  test::TempDir dir;
  chat.save(dir / "c.tks");
  Session s2(*shared_model(), o);
  Conversation again(s2, shared_tokenizer(), tmpl, "");
  again.load(dir / "c.tks");
  ASSERT_EQ(again.messages().size(), 5u);
  EXPECT_TRUE(again.stopped(2));
  EXPECT_FALSE(again.stopped(4));
}

TEST(ModelConversation, SystemMessageAndClear) {
  TALLY_NEED_MODEL();
  SessionOptions o;
  o.n_ctx = 512;
  Session s(*shared_model(), o);
  const ChatTemplate tmpl = ChatTemplate::from_gguf(shared_model()->file());
  Conversation chat(s, shared_tokenizer(), tmpl, "");
  EXPECT_TRUE(chat.messages().empty());
  chat.say("Hi.", greedy(2), {});
  chat.set_system("You are brief.");  // inserted before the turns
  ASSERT_EQ(chat.messages().size(), 3u);
  EXPECT_EQ(chat.messages()[0].role, "system");
  EXPECT_EQ(chat.messages()[1].content, "Hi.");
  chat.set_system("You are terse.");  // replaced
  EXPECT_EQ(chat.messages()[0].content, "You are terse.");
  ASSERT_EQ(chat.messages().size(), 3u);
  chat.clear();  // the turns go, the system message stays
  ASSERT_EQ(chat.messages().size(), 1u);
  EXPECT_EQ(chat.messages()[0].content, "You are terse.");
  const TurnResult r = chat.say("Hello.", greedy(2), {});
  EXPECT_EQ(chat.messages().size(), 3u);
  EXPECT_GT(r.prefilled, 0);
  chat.set_system("");  // removed
  EXPECT_EQ(chat.messages().front().role, "user");
  EXPECT_EQ(chat.messages().size(), 2u);
}

}  // namespace
}  // namespace tally
