#include "router/tool_call_parser.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdspark::router {
namespace {

const std::string kD = "｜DSML｜";

std::string Block() {
  return "\n\n<" + kD + "tool_calls>\n<" + kD + "invoke name=\"get_weather\">\n<" + kD +
         "parameter name=\"city\" string=\"true\">Paris \"Nord\"</" + kD + "parameter>\n<" + kD +
         "parameter name=\"days\" string=\"false\">3</" + kD + "parameter>\n<" + kD +
         "parameter name=\"when\" string=\"false\">tomorrow</" + kD + "parameter>\n</" + kD +
         "invoke>\n<" + kD + "invoke name=\"get_time\">\n\n</" + kD + "invoke>\n</" + kD +
         "tool_calls>";
}

struct Parsed {
  std::string content;
  std::vector<ToolCallDelta> calls;  // whole calls
};

Parsed ParseAll(const std::vector<std::string>& pieces) {
  ToolCallParser parser;
  Parsed out;
  auto take = [&](ToolCallParser::Delta d) {
    out.content += d.content;
    for (const ToolCallDelta& piece : d.calls) {
      if (!piece.id.empty()) {
        EXPECT_EQ(piece.index, static_cast<int>(out.calls.size()));
        out.calls.push_back(piece);
      } else {
        out.calls.at(piece.index).arguments += piece.arguments;
      }
    }
  };
  for (const std::string& piece : pieces) take(parser.Push(piece));
  take(parser.Flush());
  return out;
}

TEST(ToolCallParserTest, CallsBecomeJsonArgumentsHoweverTheTextIsCut) {
  const std::string text = "Let me check." + Block();
  for (size_t cut = 0; cut <= text.size(); cut += 3) {
    const Parsed p = ParseAll({text.substr(0, cut), text.substr(cut)});
    EXPECT_EQ(p.content, "Let me check.") << cut;
    ASSERT_EQ(p.calls.size(), 2u) << cut;
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].id.rfind("call_", 0), 0u);
    EXPECT_NE(p.calls[0].id, p.calls[1].id);
    // Strings are JSON strings; JSON values stay; a non-JSON value is quoted.
    EXPECT_EQ(p.calls[0].arguments, R"({"city": "Paris \"Nord\"", "days": 3, "when": "tomorrow"})");
    EXPECT_EQ(nlohmann::json::parse(p.calls[0].arguments)["days"], 3);
    EXPECT_EQ(p.calls[1].name, "get_time");
    EXPECT_EQ(p.calls[1].arguments, "{}");
  }
}

// As a stream delivers it: a few whole characters at a time.
TEST(ToolCallParserTest, CallsArriveInSmallPieces) {
  const std::string text = "Let me check." + Block();
  std::vector<std::string> pieces;
  for (size_t i = 0; i < text.size();) {
    size_t n = 0;
    for (int chars = 0; chars < 2 && i + n < text.size(); ++chars) {
      ++n;
      while (i + n < text.size() && (text[i + n] & 0xC0) == 0x80) ++n;
    }
    pieces.push_back(text.substr(i, n));
    i += n;
  }
  const Parsed p = ParseAll(pieces);
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[1].arguments, "{}");
}

TEST(ToolCallParserTest, TextWithoutCallsIsContentEvenWhenItLooksLikeATagStart) {
  EXPECT_EQ(ParseAll({"a\n\n<", "｜b"}).content, "a\n\n<｜b");
  EXPECT_TRUE(ParseAll({"plain\n\n"}).calls.empty());
  EXPECT_EQ(ParseAll({"plain\n\n"}).content, "plain\n\n");
}

TEST(ToolCallParserTest, MalformedMarkupIsContentAndACutCallIsClosed) {
  const Parsed broken = ParseAll({"<" + kD + "tool_calls>\nnot a tag"});
  EXPECT_TRUE(broken.calls.empty());
  EXPECT_EQ(broken.content, "not a tag");
  const Parsed cut =
      ParseAll({"<" + kD + "tool_calls>\n<" + kD + "invoke name=\"f\">\n<" + kD +
                "parameter name=\"x\" string=\"false\">1</" + kD + "parameter>\n<" + kD + "param"});
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0].arguments, R"({"x": 1})");
}

}  // namespace
}  // namespace pdspark::router
