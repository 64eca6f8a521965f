// Structured output on the bundled model and its trained drafter: a random model held to a JSON
// schema, a JSON object or a choice writes exactly such text, stops where the document ends,
// and DSpark (drafts masked by the grammar, each verified row masked after the drafts before
// it) gives plain decoding's greedy text. A replayed request (a disaggregated first token, a
// failover) continues the grammar where it was.
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "engine/serving/serving_engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/serving/request_collector.h"

namespace pdspark::serving {
namespace {

const std::string kModelDir = std::string(PDSPARK_SOURCE_DIR) + "/models/tiny-dsv4-dspark";
const char* const kRegex = R"([A-Z]{2}-\d{3}( [a-z]+){0,2})";
const std::string kSchema = R"({"type": "object", "properties": {
    "color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"},
    "n": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2}},
    "required": ["color", "ok", "n", "tags"], "additionalProperties": false})";

std::unique_ptr<ServingEngine> Engine(int64_t spec_tokens, bool vocabulary = true) {
  engine::ModelOptions mo;
  mo.show_progress = false;
  auto model = engine::Model::Load(kModelDir, mo).value();
  ServingOptions options;
  if (spec_tokens > 0) {
    options.drafter = dspark::Drafter::Load(kModelDir, model->config()).value();
    options.spec_tokens = spec_tokens;
  }
  if (vocabulary) {
    options.vocabulary =
        sampling::TokenVocabulary::FromModelDir(kModelDir, model->config().vocab_size).value();
  }
  return std::make_unique<ServingEngine>(std::move(model), options);
}

RequestSpec Spec(std::shared_ptr<const structured::Grammar> grammar, float temperature = 0,
                 uint64_t seed = 0) {
  RequestSpec spec;
  spec.id = "structured";
  spec.prompt = {0, 412, 77, 1290, 35, 8};
  spec.sampling.temperature = temperature;
  spec.sampling.seed = seed;
  spec.sampling.max_tokens = 200;
  spec.sampling.grammar = std::move(grammar);
  return spec;
}

struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  sampling::FinishReason reason = sampling::FinishReason::kNone;
};

Output Generate(ServingEngine& engine, const RequestSpec& spec) {
  static const auto tokenizer =
      tokenizer::Tokenizer::FromFile(kModelDir + "/tokenizer.json").value();
  RequestCollector c;
  EXPECT_TRUE(engine.Submit(spec, c.Sink()).ok());
  const RequestEvent last = c.Wait();
  EXPECT_EQ(last.outcome, Outcome::kFinished) << last.error;
  return {c.tokens(), tokenizer->Decode(c.tokens(), /*skip_special=*/true), last.finish_reason};
}

// The document the schema describes, or a test failure naming what is wrong.
void ExpectMatchesSchema(const std::string& text) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << text;
  EXPECT_EQ(doc.size(), 4u) << text;
  EXPECT_TRUE(std::set<std::string>({"red", "green", "blue"}).contains(doc.value("color", "")))
      << text;
  EXPECT_TRUE(doc["ok"].is_boolean()) << text;
  EXPECT_TRUE(doc["n"].is_number_integer()) << text;
  ASSERT_TRUE(doc["tags"].is_array()) << text;
  EXPECT_LE(doc["tags"].size(), 2u) << text;
  for (const auto& tag : doc["tags"]) {
    EXPECT_TRUE(tag.is_string() && tag.get<std::string>().size() <= 6) << text;
  }
}

TEST(StructuredOutput, GreedyJsonSchemaIsWholeAndTheSameUnderDSpark) {
  const auto grammar = structured::Grammar::FromJsonSchema(kSchema).value();
  const Output plain = Generate(*Engine(0), Spec(grammar));
  ExpectMatchesSchema(plain.text);
  EXPECT_EQ(plain.reason, sampling::FinishReason::kStop) << plain.text;  // EOS at the end
  const Output speculative = Generate(*Engine(3), Spec(grammar));
  EXPECT_EQ(speculative.tokens, plain.tokens);
  // Unconstrained, the same prompt is no JSON at all: the grammar did the work.
  RequestSpec free = Spec(nullptr);
  free.sampling.max_tokens = static_cast<int32_t>(plain.tokens.size());
  EXPECT_TRUE(
      nlohmann::json::parse(Generate(*Engine(0), free).text, nullptr, false).is_discarded());
}

// With ignore_eos the document ends and only the end token may follow, again and again; a
// draft of it must not let DSpark's later rows go unmasked.
TEST(StructuredOutput, PastTheEndOfTheDocumentDSparkStillEqualsPlainDecoding) {
  const auto grammar = structured::Grammar::Choice({"yes", "no"}).value();
  RequestSpec spec = Spec(grammar);
  spec.sampling.ignore_eos = true;
  spec.sampling.max_tokens = 40;
  const Output plain = Generate(*Engine(0), spec);
  EXPECT_EQ(plain.tokens.size(), 40u);
  EXPECT_EQ(Generate(*Engine(4), spec).tokens, plain.tokens);
}

TEST(StructuredOutput, EverySampledCompletionMatchesUnderDSpark) {
  const auto schema = structured::Grammar::FromJsonSchema(kSchema).value();
  const auto choice = structured::Grammar::Choice({"alpha", "beta gamma", "delta"}).value();
  const auto regex = structured::Grammar::Regex(kRegex).value();
  auto engine = Engine(3);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    ExpectMatchesSchema(Generate(*engine, Spec(schema, 1.0f, seed)).text);
    const Output object = Generate(*engine, Spec(structured::Grammar::AnyJsonObject(), 0.8f, seed));
    if (object.reason == sampling::FinishReason::kStop) {  // else cut by max_tokens
      EXPECT_TRUE(nlohmann::json::parse(object.text, nullptr, false).is_object()) << object.text;
    }
    const std::string code = Generate(*engine, Spec(regex, 1.0f, seed)).text;
    EXPECT_TRUE(std::regex_match(code, std::regex(kRegex))) << code;
    const std::string picked = Generate(*engine, Spec(choice, 1.0f, seed)).text;
    EXPECT_TRUE(std::set<std::string>({"alpha", "beta gamma", "delta"}).contains(picked)) << picked;
  }
}

TEST(StructuredOutput, AReplayedRequestContinuesTheGrammar) {
  const auto grammar = structured::Grammar::FromJsonSchema(kSchema).value();
  auto engine = Engine(3);
  const Output whole = Generate(*engine, Spec(grammar));
  ASSERT_GT(whole.tokens.size(), 6u);
  RequestSpec replay = Spec(grammar);
  replay.generated.assign(whole.tokens.begin(), whole.tokens.begin() + 5);
  const Output rest = Generate(*engine, replay);
  EXPECT_EQ(rest.tokens, std::vector<int32_t>(whole.tokens.begin() + 5, whole.tokens.end()));
}

TEST(StructuredOutput, RefusedWithoutTheTokenizer) {
  auto engine = Engine(0, /*vocabulary=*/false);
  RequestCollector c;
  const Status st = engine->Submit(Spec(structured::Grammar::AnyJsonObject()), c.Sink());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tokenizer.json"), std::string::npos) << st;
}

}  // namespace
}  // namespace pdspark::serving
