#include "router/chat_template.h"

#include "gtest/gtest.h"

namespace pdspark::router {
namespace {

const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kUser = "<｜User｜>";
const std::string kAsst = "<｜Assistant｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";

TEST(ChatTemplateTest, SingleUserTurnNonThinking) {
  auto p = EncodeDeepSeekV4Chat({{"user", "hello", ""}}, {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, kBos + kUser + "hello" + kAsst + "</think>");
}

TEST(ChatTemplateTest, SystemAndMultiTurn) {
  std::vector<ChatMessage> m = {{"system", "You are a helpful assistant.", ""},
                                {"user", "hello", ""},
                                {"assistant", "Hello! I am DeepSeek.", "thinking..."},
                                {"user", "1+1=?", ""}};
  auto p = EncodeDeepSeekV4Chat(m, {});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, kBos + "You are a helpful assistant." + kUser + "hello" + kAsst + "</think>" +
                    "Hello! I am DeepSeek." + kEos + kUser + "1+1=?" + kAsst + "</think>");
}

TEST(ChatTemplateTest, ThinkingModeOpensThinkAndDropsPastReasoning) {
  // Matches the example in the official encoder's documentation.
  std::vector<ChatMessage> m = {{"user", "hello", ""},
                                {"assistant", "Hello! I am DeepSeek.", "thinking..."},
                                {"user", "1+1=?", ""}};
  ChatTemplateOptions o;
  o.thinking = true;
  auto p = EncodeDeepSeekV4Chat(m, o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, kBos + kUser + "hello" + kAsst + "</think>" + "Hello! I am DeepSeek." + kEos +
                    kUser + "1+1=?" + kAsst + "<think>");
}

TEST(ChatTemplateTest, ConsecutiveUserTurnsAndNoBos) {
  ChatTemplateOptions o;
  o.add_bos = false;
  auto p = EncodeDeepSeekV4Chat({{"user", "a", ""}, {"user", "b", ""}}, o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, kUser + "a" + kUser + "b" + kAsst + "</think>");
}

TEST(ChatTemplateTest, RejectsUnknownRole) {
  EXPECT_FALSE(EncodeDeepSeekV4Chat({{"tool", "x", ""}}, {}).ok());
}

}  // namespace
}  // namespace pdspark::router
