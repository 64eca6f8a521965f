#include "router/reasoning_parser.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pdspark::router {
namespace {

// Feeds `pieces` and returns (reasoning, content) as the client would put them together.
std::pair<std::string, std::string> Split(bool thinking, const std::vector<std::string>& pieces) {
  ReasoningParser parser(thinking);
  std::string reasoning, content;
  for (const std::string& piece : pieces) {
    ReasoningParser::Delta d = parser.Push(piece);
    reasoning += d.reasoning;
    content += d.content;
  }
  ReasoningParser::Delta rest = parser.Flush();
  return {reasoning + rest.reasoning, content + rest.content};
}

TEST(ReasoningParserTest, SplitsAtTheEndTagHoweverTheDeltasCutIt) {
  const std::string text = "Let me think.</think>The answer is 4.";
  const auto expected =
      std::make_pair(std::string("Let me think."), std::string("The answer is 4."));
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    for (size_t cut2 = cut; cut2 <= text.size(); ++cut2) {
      EXPECT_EQ(Split(true, {text.substr(0, cut), text.substr(cut, cut2 - cut), text.substr(cut2)}),
                expected)
          << cut << " " << cut2;
    }
  }
}

TEST(ReasoningParserTest, HoldsBackOnlyWhatCouldStartTheTag) {
  ReasoningParser parser(true);
  EXPECT_EQ(parser.Push("a</th").reasoning, "a");
  ReasoningParser::Delta d = parser.Push("ought");  // not the tag after all
  EXPECT_EQ(d.reasoning, "</thought");
  EXPECT_EQ(d.content, "");
}

TEST(ReasoningParserTest, ARepeatedStartTagIsDropped) {
  EXPECT_EQ(Split(true, {"<thi", "nk>plan</think>done"}),
            std::make_pair(std::string("plan"), std::string("done")));
}

TEST(ReasoningParserTest, NoEndTagIsAllReasoningAndNotThinkingIsAllContent) {
  EXPECT_EQ(Split(true, {"still thinking", " </thi"}),
            std::make_pair(std::string("still thinking </thi"), std::string()));
  EXPECT_EQ(Split(false, {"plain </think> text"}),
            std::make_pair(std::string(), std::string("plain </think> text")));
}

TEST(ReasoningParserTest, ContentAfterTheTagPassesThrough) {
  ReasoningParser parser(true);
  parser.Push("r</think>");
  ReasoningParser::Delta d = parser.Push("</think>x");
  EXPECT_EQ(d.content, "</think>x");
  EXPECT_EQ(d.reasoning, "");
}

}  // namespace
}  // namespace pdspark::router
