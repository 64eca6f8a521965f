// Structured output's grammar: schemas compile or are refused by name, and the matcher accepts
// exactly the documents the schema allows, byte by byte.
#include "common/structured/grammar_matcher.h"

#include <string>

#include "gtest/gtest.h"

namespace pdspark::structured {
namespace {

std::shared_ptr<const Grammar> Schema(const std::string& schema) {
  auto grammar = Grammar::FromJsonSchema(schema);
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  return grammar.ok() ? *grammar : Grammar::AnyJsonObject();
}

// Whole: every byte accepted and the document complete; Prefix: accepted, not complete.
enum class Match { kWhole, kPrefix, kRefused };

Match Feed(const std::shared_ptr<const Grammar>& grammar, const std::string& text) {
  GrammarMatcher matcher(grammar);
  if (!matcher.Advance(text)) return Match::kRefused;
  return matcher.CanEnd() ? Match::kWhole : Match::kPrefix;
}

TEST(GrammarMatcher, ObjectWithRequiredEnumAndBooleanProperties) {
  const auto g = Schema(R"({"type": "object", "properties": {
      "color": {"enum": ["red", "green"]}, "ok": {"type": "boolean"},
      "note": {"type": "string", "maxLength": 3}},
      "required": ["color", "ok"], "additionalProperties": false})");
  EXPECT_EQ(Feed(g, R"({"color": "red", "ok": true})"), Match::kWhole);
  EXPECT_EQ(Feed(g, R"({ "ok":false,"color":"green"})"), Match::kWhole);  // any order
  EXPECT_EQ(Feed(g, "{\n"), Match::kRefused);  // one space between tokens, nothing else
  EXPECT_EQ(Feed(g, R"({"color":"red","ok":true,"note":"abc"})"), Match::kWhole);
  EXPECT_EQ(Feed(g, R"({"color":"red","ok":tr)"), Match::kPrefix);
  EXPECT_EQ(Feed(g, R"({"color":"red"})"), Match::kRefused);             // ok is required
  EXPECT_EQ(Feed(g, R"({"color":"blue")"), Match::kRefused);             // not in the enum
  EXPECT_EQ(Feed(g, R"({"colour":)"), Match::kRefused);                  // no other keys
  EXPECT_EQ(Feed(g, R"({"ok":true,"ok":)"), Match::kRefused);            // a key only once
  EXPECT_EQ(Feed(g, R"({"note":"abcd")"), Match::kRefused);              // maxLength
  EXPECT_EQ(Feed(g, R"({"color":"red","ok":true} )"), Match::kRefused);  // nothing after
  EXPECT_EQ(Feed(g, R"({"color":"red","ok":true,})"), Match::kRefused);  // no trailing comma
  EXPECT_EQ(Feed(g, "{" + std::string(kMaxWhitespaceRun + 1, ' ')), Match::kRefused);
}

TEST(GrammarMatcher, NumbersIntegersAndArrays) {
  const auto g = Schema(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1,
                            "maxItems": 3})");
  EXPECT_EQ(Feed(g, "[1, -20, 0]"), Match::kWhole);
  EXPECT_EQ(Feed(g, "[]"), Match::kRefused);       // minItems
  EXPECT_EQ(Feed(g, "[1,2,3,"), Match::kRefused);  // maxItems
  EXPECT_EQ(Feed(g, "[1.5"), Match::kRefused);     // an integer has no fraction
  EXPECT_EQ(Feed(g, "[01"), Match::kRefused);      // no leading zeros
  const auto n = Schema(R"({"type": "number"})");
  EXPECT_EQ(Feed(n, "-0.25e+3"), Match::kWhole);  // a number ends with the document
  EXPECT_EQ(Feed(n, "1."), Match::kPrefix);
  EXPECT_EQ(Feed(n, std::string(kMaxNumberBytes + 1, '7')), Match::kRefused);
}

TEST(GrammarMatcher, StringsCheckEscapesAndUtf8) {
  const auto g = Schema(R"({"type": "string", "minLength": 2})");
  EXPECT_EQ(Feed(g, R"("a\"\u00e9")"), Match::kWhole);
  EXPECT_EQ(Feed(g, "\"\xc3\xa9\xc3\xa9\""), Match::kWhole);  // two code points
  EXPECT_EQ(Feed(g, "\"\xc3\xa9\""), Match::kRefused);        // one: minLength 2
  EXPECT_EQ(Feed(g, "\"\xc3("), Match::kRefused);             // a broken UTF-8 sequence
  EXPECT_EQ(Feed(g, "\"a\nb"), Match::kRefused);              // a raw control character
  EXPECT_EQ(Feed(g, R"("\x")"), Match::kRefused);             // no such escape
}

TEST(GrammarMatcher, AnyOfNullableTypesAndRecursiveRefs) {
  const auto g = Schema(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": ["integer", "null"]}, "next": {"anyOf": [{"$ref": "#/$defs/node"},
      {"type": "null"}]}}, "required": ["v"], "additionalProperties": false}},
      "$ref": "#/$defs/node"})");
  EXPECT_EQ(Feed(g, R"({"v":1,"next":{"v":null,"next":null}})"), Match::kWhole);
  EXPECT_EQ(Feed(g, R"({"v":1,"next":{"next":null}})"), Match::kRefused);  // v required
  EXPECT_EQ(Feed(g, R"({"v":"1")"), Match::kRefused);
}

TEST(GrammarMatcher, JsonObjectAndChoice) {
  const auto object = Grammar::AnyJsonObject();
  EXPECT_EQ(Feed(object, R"( {"a": [1, {"b": null}], "c": "d"})"), Match::kWhole);
  EXPECT_EQ(Feed(object, R"({"a":  1})"), Match::kRefused);
  EXPECT_EQ(Feed(object, "[1]"), Match::kRefused);  // an object, not any value
  EXPECT_EQ(Feed(object, R"({"a": tru})"), Match::kRefused);
  const auto choice = Grammar::Choice({"yes", "no", "no way"}).value();
  EXPECT_EQ(Feed(choice, "no"), Match::kWhole);  // whole, yet " way" may follow
  EXPECT_EQ(Feed(choice, "no way"), Match::kWhole);
  EXPECT_EQ(Feed(choice, " yes"), Match::kRefused);  // choices are taken as written
  EXPECT_EQ(Feed(choice, "ye"), Match::kPrefix);
}

TEST(GrammarMatcher, RegexMatchesWholeOutputs) {
  const auto phone = Grammar::Regex(R"(^\d{3}-\d{4}$)").value();
  EXPECT_EQ(Feed(phone, "555-0199"), Match::kWhole);
  EXPECT_EQ(Feed(phone, "555-01"), Match::kPrefix);
  EXPECT_EQ(Feed(phone, "5550-"), Match::kRefused);
  EXPECT_EQ(Feed(phone, "555-01999"), Match::kRefused);  // nothing after the match
  const auto names = Grammar::Regex(R"([A-Z][a-z]+( [A-Z][a-z]+)*)").value();
  EXPECT_EQ(Feed(names, "Ann Lee"), Match::kWhole);
  EXPECT_EQ(Feed(names, "Ann "), Match::kPrefix);
  EXPECT_EQ(Feed(names, "ann"), Match::kRefused);
  const auto counted = Grammar::Regex("(?:ab|c){2,3}x?").value();
  EXPECT_EQ(Feed(counted, "abc"), Match::kWhole);
  EXPECT_EQ(Feed(counted, "cabcx"), Match::kWhole);
  EXPECT_EQ(Feed(counted, "c"), Match::kPrefix);
  EXPECT_EQ(Feed(counted, "abcabc"), Match::kRefused);  // at most 3
  const auto classes = Grammar::Regex(R"([^\s,]+,[a-c\-]\.)").value();
  EXPECT_EQ(Feed(classes, "x1,-."), Match::kWhole);
  EXPECT_EQ(Feed(classes, "x 1"), Match::kRefused);
  for (const auto& [pattern, named] :
       std::vector<std::pair<std::string, std::string>>{{"(?=a)b", "lookarounds"},
                                                        {R"((a)\1)", "\\1"},
                                                        {"[z-a]", "reversed"},
                                                        {"(ab", "unclosed '('"},
                                                        {"a+?", "lazy"},
                                                        {"*a", "nothing to repeat"}}) {
    auto grammar = Grammar::Regex(pattern);
    ASSERT_FALSE(grammar.ok()) << pattern;
    EXPECT_NE(grammar.status().message().find(named), std::string::npos)
        << pattern << " -> " << grammar.status();
  }
}

TEST(GrammarCompile, UnsupportedKeywordsAndBadSchemasAreRefusedByName) {
  for (const auto& [schema, named] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type": "string", "pattern": "^a"})", "\"pattern\""},
           {R"({"type": "integer", "minimum": 3})", "\"minimum\""},
           {R"({"oneOf": [{"type": "null"}]})", "\"oneOf\""},
           {R"({"type": "strin"})", "unknown type \"strin\""},
           {R"({"$ref": "#/$defs/missing"})", "#/$defs/missing"},
           {R"({"type": "object", "required": ["a"], "properties": {}})", "\"a\""},
           {R"({"type": "array", "minItems": 3, "maxItems": 2})", "maxItems < minItems"},
           {R"({"type": "object")", "not valid JSON"},
       }) {
    auto grammar = Grammar::FromJsonSchema(schema);
    ASSERT_FALSE(grammar.ok()) << schema;
    EXPECT_EQ(grammar.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(grammar.status().message().find(named), std::string::npos)
        << schema << " -> " << grammar.status();
  }
  EXPECT_FALSE(Grammar::Choice({}).ok());
}

}  // namespace
}  // namespace pdspark::structured
