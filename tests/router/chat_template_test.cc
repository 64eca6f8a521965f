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

TEST(ChatTemplateTest, RejectsUnknownRoleAndAStrayToolResult) {
  EXPECT_FALSE(EncodeDeepSeekV4Chat({{"robot", "x", ""}}, {}).ok());
  EXPECT_FALSE(EncodeDeepSeekV4Chat({{"user", "x", ""}, {"tool", "r", "", {}, "c1"}}, {}).ok());
}

// A tool round trip as encoding_dsv4.py writes it: the tools section after the (added) system
// message, the call as a DSML block, the results (in the calls' order) as one user turn, and
// every turn's reasoning kept in thinking mode.
TEST(ChatTemplateTest, ToolsCallsAndResults) {
  const std::string schema =
      R"({"name": "get_weather", "parameters": {"type": "object", "properties": {}}})";
  ChatMessage call{"assistant", "", "I should look.", {}, ""};
  call.tool_calls = {{"c1", "get_weather", R"({"city": "Paris", "days": 3, "metric": true})"},
                     {"c2", "get_time", "{}"}};
  std::vector<ChatMessage> m = {{"user", "Weather?", ""},
                                call,
                                {"tool", "12:00", "", {}, "c2"},
                                {"tool", "sunny", "", {}, "c1"},
                                {"user", "Thanks", ""}};
  ChatTemplateOptions o;
  o.thinking = true;
  o.tools = {schema};
  auto p = EncodeDeepSeekV4Chat(m, o);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::string dsml = "｜DSML｜";
  const std::string block =
      "\n\n<" + dsml + "tool_calls>\n<" + dsml + "invoke name=\"get_weather\">\n<" + dsml +
      "parameter name=\"city\" string=\"true\">Paris</" + dsml + "parameter>\n<" + dsml +
      "parameter name=\"days\" string=\"false\">3</" + dsml + "parameter>\n<" + dsml +
      "parameter name=\"metric\" string=\"false\">true</" + dsml + "parameter>\n</" + dsml +
      "invoke>\n<" + dsml + "invoke name=\"get_time\">\n\n</" + dsml + "invoke>\n</" + dsml +
      "tool_calls>";
  ASSERT_EQ(p->rfind(kBos + "\n\n## Tools\n\n", 0), 0u) << *p;
  EXPECT_NE(p->find("### Available Tool Schemas\n\n" + schema +
                    "\n\nYou MUST strictly follow the above defined tool name and parameter "
                    "schemas to invoke tool calls.\n" +
                    kUser + "Weather?"),
            std::string::npos)
      << *p;
  const std::string tail = kUser + "Weather?" + kAsst + "<think>" + "I should look.</think>" +
                           block + kEos + kUser + "<tool_result>sunny</tool_result>\n\n" +
                           "<tool_result>12:00</tool_result>\n\nThanks" + kAsst + "<think>";
  ASSERT_GE(p->size(), tail.size());
  EXPECT_EQ(p->substr(p->size() - tail.size()), tail);
}

}  // namespace
}  // namespace pdspark::router
