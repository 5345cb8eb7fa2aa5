// Chat template recognition and rendering (no model needed: the SmolLM2
// template text is copied here from the GGUF; renderings come from the HF
// fixture tests/fixtures/tokenizer/smollm2.json).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer_test_util.h"

namespace tally {
namespace {

// tokenizer.chat_template of SmolLM2-135M-Instruct (real newlines inside the
// Jinja string literals, exactly as stored in the GGUF).
const std::string kSmolLM2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

// A ChatML template without a default system turn (Hermes/OpenChat style).
const std::string kChatML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, SmolLM2MatchesHuggingFace) {
  const ChatTemplate ct = ChatTemplate::from_source(kSmolLM2, "test");
  EXPECT_EQ(ct.family(), "chatml-default-system");
  std::ifstream in(TALLY_FIXTURES_DIR "/tokenizer/smollm2.json");
  ASSERT_TRUE(in);
  const nlohmann::json fx = nlohmann::json::parse(in);
  ASSERT_GE(fx["chats"].size(), 8u);
  for (const auto& c : fx["chats"]) {
    std::vector<ChatMessage> msgs;
    for (const auto& m : c["messages"])
      msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    EXPECT_EQ(ct.render(msgs, c["add_generation_prompt"].get<bool>()), c["text"].get<std::string>());
  }
}

TEST(ChatTemplate, SmolLM2DefaultSystem) {
  const ChatTemplate ct = ChatTemplate::from_source(kSmolLM2, "test");
  EXPECT_EQ(ct.default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const std::vector<ChatMessage> user = {{"user", "Hi"}};
  EXPECT_EQ(ct.render(user, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<ChatMessage> sys = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(ct.render(sys, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  // As in the Jinja source, nothing is inserted into an empty conversation.
  EXPECT_EQ(ct.render({}, true), "<|im_start|>assistant\n");
  EXPECT_EQ(ct.render({}, false), "");
}

TEST(ChatTemplate, GenericChatML) {
  const ChatTemplate ct = ChatTemplate::from_source(kChatML, "test");
  EXPECT_EQ(ct.family(), "chatml");
  EXPECT_EQ(ct.default_system(), "");
  const std::vector<ChatMessage> msgs = {{"user", "a\nb"}, {"assistant", "c"}};
  EXPECT_EQ(ct.render(msgs, false),
            "<|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\nc<|im_end|>\n");
  EXPECT_EQ(ct.render(msgs, true),
            "<|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\nc<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, EscapedNewlinesInDefaultSystem) {
  // The same template written with "\n" escapes instead of real newlines.
  std::string t = kSmolLM2;
  for (size_t p; (p = t.find('\n')) != std::string::npos;) t.replace(p, 1, "\\n");
  const ChatTemplate ct = ChatTemplate::from_source(t, "test");
  EXPECT_EQ(ct.family(), "chatml-default-system");
  EXPECT_EQ(ct.default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
}

TEST(ChatTemplate, UnknownTemplateFailsNamingIt) {
  const std::string llama3 =
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
      "trim + '<|eot_id|>' %}{{ content }}{% endfor %}";
  const std::string msg = error_of([&] { (void)ChatTemplate::from_source(llama3, "model.gguf"); });
  EXPECT_NE(msg.find("model.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unsupported chat template"), std::string::npos) << msg;
  EXPECT_NE(msg.find("{% set loop_messages = messages %}{% for message in loop_mes"),
            std::string::npos) << msg;
  EXPECT_EQ(msg.find("'<|eot_id|>'"), std::string::npos) << "quotes only the beginning: " << msg;
}

TEST(ChatTemplate, MissingTemplateInFile) {
  auto g = test::gguf_from_bytes(
      test::GgufBuilder().kv("general.architecture", test::m_str("llama")).build(), "nochat.gguf");
  const std::string msg = error_of([&] { (void)ChatTemplate::from_gguf(*g); });
  EXPECT_NE(msg.find("nochat.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokenizer.chat_template"), std::string::npos) << msg;
}

// Gemma 3's template (google/gemma-3-270m's tokenizer_config.json): roles
// alternate as user / model, contents are trimmed, a system message opens the
// first user turn followed by a blank line, BOS comes from the tokenizer.
TEST(ChatTemplate, Gemma) {
  const ChatTemplate ct = ChatTemplate::from_source(
      "{{ bos_token }}...{{ '<start_of_turn>' + role + '\\n' }}...{{ '<end_of_turn>\\n' }}", "gemma.jinja");
  EXPECT_EQ(ct.family(), "gemma");
  const ChatMessage turns[] = {{"system", "Be brief."}, {"user", " Hi there \n"}, {"assistant", "Hello."},
                               {"user", "Bye"}};
  EXPECT_EQ(ct.render(turns, true),
            "<start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n"
            "<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n"
            "<start_of_turn>model\n");
  EXPECT_EQ(ct.render(std::span<const ChatMessage>(turns + 1, 1), false), "<start_of_turn>user\nHi there<end_of_turn>\n");
  // A gemma3 file without a template gets its architecture's.
  auto g = test::gguf_from_bytes(
      test::GgufBuilder().kv("general.architecture", test::m_str("gemma3")).build(), "gemma3.gguf");
  EXPECT_EQ(ChatTemplate::from_gguf(*g).family(), "gemma");
}

TEST(ChatTemplate, FromGgufMetadata) {
  auto g = test::gguf_from_bytes(
      test::GgufBuilder().kv("tokenizer.chat_template", test::m_str(kSmolLM2)).build());
  const ChatTemplate ct = ChatTemplate::from_gguf(*g);
  EXPECT_EQ(ct.family(), "chatml-default-system");
}

}  // namespace
}  // namespace tally
