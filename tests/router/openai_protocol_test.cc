#include "router/openai_protocol.h"

#include <algorithm>
#include <limits>
#include <string>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/openai_tools.h"

namespace pdspark::router {
namespace {

using nlohmann::json;

OpenAiRequest MustParse(const std::string& body, ApiKind kind = ApiKind::kCompletion) {
  ParseResult r = ParseOpenAiRequest(body, kind, ParseLimits{});
  if (auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << "unexpected error: " << e->message;
    return {};
  }
  return std::get<OpenAiRequest>(r);
}

TEST(OpenAiProtocolTest, ParsesCompletionWithAllSamplingFields) {
  OpenAiRequest r = MustParse(R"({
    "model": "m", "prompt": "hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    "top_k": 40, "min_p": 0.05, "seed": 42, "stop": ["a", "bc"], "stop_token_ids": [3, 4],
    "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true},
    "n": 1, "logprobs": null, "some_future_field": {"x": 1}, "request_id": "abc"})");
  EXPECT_EQ(r.kind, ApiKind::kCompletion);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "hello");
  EXPECT_EQ(r.sampling.max_tokens, 7u);
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 0.5);
  EXPECT_DOUBLE_EQ(r.sampling.top_p, 0.9);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_DOUBLE_EQ(r.sampling.min_p, 0.05);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.sampling.stop_token_ids, (std::vector<uint32_t>{3, 4}));
  EXPECT_TRUE(r.sampling.ignore_eos);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.request_id, "abc");
}

TEST(OpenAiProtocolTest, DefaultsMatchOpenAi) {
  OpenAiRequest r = MustParse(R"({"prompt": "x"})");
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 1.0);
  EXPECT_DOUBLE_EQ(r.sampling.top_p, 1.0);
  EXPECT_EQ(r.sampling.top_k, -1);
  EXPECT_FALSE(r.sampling.max_tokens.has_value());
  EXPECT_FALSE(r.sampling.seed.has_value());
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.sampling.skip_special_tokens);
}

TEST(OpenAiProtocolTest, PromptForms) {
  EXPECT_EQ(MustParse(R"({"prompt": [1, 2, 3]})").prompts.at(0).token_ids,
            (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(MustParse(R"({"prompt": ["one"]})").prompts.at(0).text, "one");
  EXPECT_EQ(MustParse(R"({"prompt": [[5, 6]]})").prompts.at(0).token_ids,
            (std::vector<uint32_t>{5, 6}));
  // A batch: every prompt, in order, text and ids alike.
  const OpenAiRequest batch = MustParse(R"({"prompt": ["a", [7, 8], "b"], "n": 2})");
  ASSERT_EQ(batch.prompts.size(), 3u);
  EXPECT_EQ(batch.prompts[0].text, "a");
  EXPECT_FALSE(batch.prompts[1].text.has_value());
  EXPECT_EQ(batch.prompts[1].token_ids, (std::vector<uint32_t>{7, 8}));
  EXPECT_EQ(batch.prompts[2].text, "b");
  EXPECT_EQ(batch.n, 2u);
  EXPECT_EQ(batch.best_of, 2u);  // best_of defaults to n
  const OpenAiRequest best = MustParse(R"({"prompt": "a", "n": 2, "best_of": 5})");
  EXPECT_EQ(best.best_of, 5u);
  EXPECT_EQ(MustParse(R"({"prompt": "s", "stop": "x"})").sampling.stop,
            std::vector<std::string>{"x"});
}

TEST(OpenAiProtocolTest, ParsesChatMessages) {
  OpenAiRequest r = MustParse(R"({
    "model": "m", "max_completion_tokens": 5, "max_tokens": 99,
    "messages": [{"role": "system", "content": "be nice"},
                 {"role": "user", "content": [{"type": "text", "text": "a"},
                                              {"type": "text", "text": "b"}]},
                 {"role": "assistant", "content": null},
                 {"role": "user", "content": "c", "name": "bob"}],
    "chat_template_kwargs": {"thinking": true}})",
                              ApiKind::kChat);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "a\nb");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].content, "c");
  EXPECT_EQ(r.sampling.max_tokens, 5u);
  EXPECT_TRUE(r.thinking);
}

constexpr const char* kTools =
    R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
        {"type": "object", "properties": {"city": {"type": "string"}}}}}])";

struct BadCase {
  const char* name;
  ApiKind kind;
  std::string body;
  int status;
  const char* param;  // "" = null
};

class BadBodyTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadBodyTest, GivesOpenAiError) {
  const BadCase& c = GetParam();
  ParseLimits limits;
  limits.max_body_bytes = 4096;
  ParseResult r = ParseOpenAiRequest(c.body, c.kind, limits);
  ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << c.name;
  const ApiError& e = std::get<ApiError>(r);
  EXPECT_EQ(e.http_status, c.status) << c.name << ": " << e.message;
  EXPECT_EQ(e.param, c.param) << c.name << ": " << e.message;
  EXPECT_FALSE(e.message.empty());
  json body = json::parse(FormatErrorBody(e));
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["message"], e.message);
  if (c.param[0] == '\0') {
    EXPECT_TRUE(body["error"]["param"].is_null());
  } else {
    EXPECT_EQ(body["error"]["param"], c.param);
  }
}

const ApiKind kC = ApiKind::kCompletion;

// One stop string more than ParseLimits allows.
std::string TooManyStops() {
  json body = {{"prompt", "x"}, {"stop", json::array()}};
  for (size_t i = 0; i <= ParseLimits{}.max_stop_strings; ++i) {
    body["stop"].push_back("s" + std::to_string(i));
  }
  return body.dump();
}
const ApiKind kChat = ApiKind::kChat;

INSTANTIATE_TEST_SUITE_P(
    Table, BadBodyTest,
    ::testing::Values(
        BadCase{"malformed", kC, R"({"prompt": "x",)", 400, ""},
        BadCase{"not_object", kC, R"([1,2])", 400, ""},
        BadCase{"invalid_utf8", kC, "{\"prompt\": \"\xff\xfe\"}", 400, ""},
        // The JSON parser throws out_of_range (not parse_error) on overflow (fuzz finding).
        BadCase{"number_overflow", kC, R"({"prompt": "x", "temperature": 1e999})", 400, ""},
        BadCase{"too_large", kC, "{\"prompt\": \"" + std::string(5000, 'a') + "\"}", 413, ""},
        BadCase{"too_deep", kC, std::string(100, '[') + std::string(100, ']'), 400, ""},
        BadCase{"missing_prompt", kC, R"({"model": "m"})", 400, "prompt"},
        BadCase{"prompt_number", kC, R"({"prompt": 5})", 400, "prompt"},
        BadCase{"prompt_empty", kC, R"({"prompt": ""})", 400, "prompt"},
        BadCase{"prompt_batch_empty_one", kC, R"({"prompt": ["a", ""]})", 400, "prompt"},
        BadCase{"prompt_batch_number", kC, R"({"prompt": ["a", 5]})", 400, "prompt"},
        BadCase{"prompt_batch_too_big", kC, R"({"prompt": ["a", "b", "c"], "best_of": 50})", 400,
                "best_of"},
        BadCase{"prompt_negative_id", kC, R"({"prompt": [1, -2]})", 400, "prompt"},
        BadCase{"max_tokens_zero", kC, R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens"},
        BadCase{"max_tokens_string", kC, R"({"prompt": "x", "max_tokens": "5"})", 400,
                "max_tokens"},
        BadCase{"max_tokens_fraction", kC, R"({"prompt": "x", "max_tokens": 2.5})", 400,
                "max_tokens"},
        BadCase{"temperature_negative", kC, R"({"prompt": "x", "temperature": -1})", 400,
                "temperature"},
        BadCase{"temperature_string", kC, R"({"prompt": "x", "temperature": "hot"})", 400,
                "temperature"},
        BadCase{"top_p_zero", kC, R"({"prompt": "x", "top_p": 0})", 400, "top_p"},
        BadCase{"top_p_big", kC, R"({"prompt": "x", "top_p": 1.5})", 400, "top_p"},
        BadCase{"top_k_bad", kC, R"({"prompt": "x", "top_k": -5})", 400, "top_k"},
        BadCase{"min_p_bad", kC, R"({"prompt": "x", "min_p": 2})", 400, "min_p"},
        BadCase{"seed_string", kC, R"({"prompt": "x", "seed": "1"})", 400, "seed"},
        BadCase{"n_zero", kC, R"({"prompt": "x", "n": 0})", 400, "n"},
        BadCase{"n_too_many", kC, R"({"prompt": "x", "n": 129})", 400, "n"},
        BadCase{"best_of_below_n", kC, R"({"prompt": "x", "n": 3, "best_of": 2})", 400, "best_of"},
        BadCase{"best_of_streamed", kC, R"({"prompt": "x", "best_of": 2, "stream": true})", 400,
                "best_of"},
        BadCase{"stop_number", kC, R"({"prompt": "x", "stop": 3})", 400, "stop"},
        BadCase{"stop_list_mixed", kC, R"({"prompt": "x", "stop": ["a", 1]})", 400, "stop"},
        BadCase{"too_many_stops", kC, TooManyStops(), 400, "stop"},
        BadCase{"stop_ids_bad", kC, R"({"prompt": "x", "stop_token_ids": "1"})", 400,
                "stop_token_ids"},
        BadCase{"ignore_eos_string", kC, R"({"prompt": "x", "ignore_eos": "yes"})", 400,
                "ignore_eos"},
        BadCase{"stream_string", kC, R"({"prompt": "x", "stream": "true"})", 400, "stream"},
        BadCase{"stream_options_no_stream", kC,
                R"({"prompt": "x", "stream_options": {"include_usage": true}})", 400,
                "stream_options"},
        BadCase{"include_usage_type", kC,
                R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})", 400,
                "stream_options.include_usage"},
        BadCase{"logprobs_too_many", kC, R"({"prompt": "x", "logprobs": 21})", 400, "logprobs"},
        BadCase{"logprobs_true", kC, R"({"prompt": "x", "logprobs": true})", 400, "logprobs"},
        BadCase{"chat_logprobs_number", kChat,
                R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 3})", 400,
                "logprobs"},
        BadCase{"chat_top_logprobs_alone", kChat,
                R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400,
                "top_logprobs"},
        BadCase{"chat_top_logprobs_too_many", kChat,
                R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
                    "top_logprobs": 21})",
                400, "top_logprobs"},
        BadCase{"prompt_logprobs_streamed", kC,
                R"({"prompt": "x", "prompt_logprobs": 1, "stream": true})", 400, "prompt_logprobs"},
        BadCase{"presence_penalty_big", kC, R"({"prompt": "x", "presence_penalty": 2.5})", 400,
                "presence_penalty"},
        BadCase{"frequency_penalty_string", kC, R"({"prompt": "x", "frequency_penalty": "1"})", 400,
                "frequency_penalty"},
        BadCase{"repetition_penalty_zero", kC, R"({"prompt": "x", "repetition_penalty": 0})", 400,
                "repetition_penalty"},
        BadCase{"logit_bias_list", kC, R"({"prompt": "x", "logit_bias": [1]})", 400, "logit_bias"},
        BadCase{"logit_bias_key", kC, R"({"prompt": "x", "logit_bias": {"a": 1}})", 400,
                "logit_bias"},
        BadCase{"logit_bias_value", kC, R"({"prompt": "x", "logit_bias": {"5": 101}})", 400,
                "logit_bias"},
        BadCase{"bad_words_string", kC, R"({"prompt": "x", "bad_words": "no"})", 400, "bad_words"},
        BadCase{"bad_words_empty_word", kC, R"({"prompt": "x", "bad_words": [""]})", 400,
                "bad_words"},
        BadCase{"response_format_type", kC,
                R"({"prompt": "x", "response_format": {"type": "xml"}})", 400,
                "response_format.type"},
        BadCase{"response_format_no_schema", kC,
                R"({"prompt": "x", "response_format": {"type": "json_schema"}})", 400,
                "response_format.json_schema"},
        BadCase{"schema_pattern", kC,
                R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema":
                    {"name": "n", "schema": {"type": "string", "pattern": "a+"}}}})",
                400, "response_format"},
        BadCase{"guided_json_number", kC, R"({"prompt": "x", "guided_json": 3})", 400,
                "guided_json"},
        BadCase{"guided_choice_empty", kC, R"({"prompt": "x", "guided_choice": []})", 400,
                "guided_choice"},
        BadCase{"two_constraints", kC,
                R"({"prompt": "x", "guided_json": {}, "guided_choice": ["a"]})", 400,
                "guided_json"},
        BadCase{"guided_regex_lookahead", kC, R"j({"prompt": "x", "guided_regex": "(?=a)"})j", 400,
                "guided_regex"},
        BadCase{"guided_grammar", kC, R"({"prompt": "x", "guided_grammar": "root ::= x"})", 400,
                "guided_grammar"},
        BadCase{"structured_outputs_grammar", kC,
                R"({"prompt": "x", "structured_outputs": {"grammar": "root ::= x"}})", 400,
                "structured_outputs.grammar"},
        BadCase{"thinking_with_schema", kChat,
                R"({"messages": [{"role": "user", "content": "x"}], "guided_json": {},
                    "chat_template_kwargs": {"thinking": true}})",
                400, "chat_template_kwargs.thinking"},
        BadCase{"beam_search", kC, R"({"prompt": "x", "use_beam_search": true})", 400,
                "use_beam_search"},
        BadCase{"tool_choice_required_no_tools", kChat,
                R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
                400, "tool_choice"},
        BadCase{"tool_choice_unknown_function", kChat,
                R"({"messages": [{"role": "user", "content": "x"}], )" + std::string(kTools) +
                    R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}}})",
                400, "tool_choice.function.name"},
        BadCase{"tool_choice_and_response_format", kChat,
                R"({"messages": [{"role": "user", "content": "x"}], )" + std::string(kTools) +
                    R"(, "tool_choice": "required", "response_format": {"type": "json_object"}})",
                400, "tool_choice"},
        BadCase{"tool_parameters_uncompiled", kChat,
                R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
                    "tools": [{"type": "function", "function": {"name": "f", "parameters":
                    {"type": "object", "properties": {"d": {"type": "string", "format":
                    "date"}}}}}]})",
                400, "tools"},
        BadCase{"parallel_tool_calls_string", kChat,
                R"({"messages": [{"role": "user", "content": "x"}], )" + std::string(kTools) +
                    R"(, "tool_choice": "required", "parallel_tool_calls": "no"})",
                400, "parallel_tool_calls"},
        BadCase{"tool_call_arguments_not_object", kChat,
                R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "c",
                    "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]})",
                400, "messages[0].tool_calls[0].function.arguments"},
        BadCase{"completion_tools", kC, R"({"prompt": "x", "tools": [{"type": "function"}]})", 400,
                "tools"},
        BadCase{"echo_string", kC, R"({"prompt": "x", "echo": "yes"})", 400, "echo"},
        BadCase{"chat_echo", kChat,
                R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", 400, "echo"},
        BadCase{"model_number", kC, R"({"prompt": "x", "model": 3})", 400, "model"},
        BadCase{"missing_messages", kChat, R"({"model": "m"})", 400, "messages"},
        BadCase{"messages_empty", kChat, R"({"messages": []})", 400, "messages"},
        BadCase{"message_no_role", kChat, R"({"messages": [{"content": "x"}]})", 400,
                "messages[0].role"},
        BadCase{"message_bad_role", kChat, R"({"messages": [{"role": "robot", "content": "x"}]})",
                400, "messages[0].role"},
        BadCase{"message_image", kChat,
                R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
                "messages[0].content[0].type"},
        BadCase{"message_content_number", kChat,
                R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content"},
        BadCase{"chat_max_completion_tokens", kChat,
                R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1})",
                400, "max_completion_tokens"},
        BadCase{
            "tools", kChat,
            R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
            400, "tools[0].function"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

ResponseHeader Header() { return ResponseHeader{"cmpl-1", 1700000000, "tiny"}; }

TEST(OpenAiProtocolTest, ParsesLogprobsFields) {
  const OpenAiRequest c = MustParse(R"({"prompt": "x", "logprobs": 2, "echo": true})");
  EXPECT_EQ(c.sampling.logprobs, 2u);
  EXPECT_TRUE(c.echo);
  // An echoed prompt's logprobs come from the engine's prompt logprobs.
  EXPECT_EQ(c.sampling.prompt_logprobs, 2u);
  EXPECT_FALSE(c.prompt_logprobs.has_value());

  const OpenAiRequest h = MustParse(
      R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 4,
          "prompt_logprobs": 1})",
      ApiKind::kChat);
  EXPECT_EQ(h.sampling.logprobs, 4u);
  EXPECT_EQ(h.prompt_logprobs, 1u);
  EXPECT_EQ(h.sampling.prompt_logprobs, 1u);

  const OpenAiRequest plain = MustParse(R"({"prompt": "x", "logprobs": false, "echo": false})");
  EXPECT_FALSE(plain.sampling.logprobs.has_value());
  EXPECT_FALSE(plain.sampling.prompt_logprobs.has_value());
  const OpenAiRequest chat_off = MustParse(
      R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false, "top_logprobs": 0})",
      ApiKind::kChat);
  EXPECT_FALSE(chat_off.sampling.logprobs.has_value());
}

// Refused fields are accepted with the values that ask for nothing (what clients send by default).
TEST(OpenAiProtocolTest, RefusedFieldsAcceptTheirHarmlessValues) {
  MustParse(R"({"prompt": "x", "response_format": {"type": "text"}, "use_beam_search": false,
                "suffix": "", "logits_processors": [], "guided_json": null})");
  MustParse(R"({"messages": [{"role": "user", "content": "x"}], "tools": [], "tool_choice": "none",
                "continue_final_message": false, "echo": false})",
            ApiKind::kChat);
}

// Tool schemas keep the order their keys were sent in, written as Python's json.dumps writes them.
TEST(OpenAiProtocolTest, ParsesToolsAndToolTurns) {
  const OpenAiRequest r = MustParse(
      R"({"messages": [{"role": "user", "content": "x"},
                       {"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
                        "type": "function", "function": {"name": "f", "arguments": "{\"b\": 1}"}}]},
                       {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
          "tools": [{"type": "function", "function": {"name": "f", "parameters":
                     {"type": "object", "zeta": [1, 2.5, "é"], "alpha": null}}}],
          "tool_choice": "auto"})",
      ApiKind::kChat);
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(
      r.tools[0],
      R"({"name": "f", "parameters": {"type": "object", "zeta": [1, 2.5, "é"], "alpha": null}})");
  EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "c1");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"b": 1})");
  EXPECT_EQ(r.messages[2].tool_call_id, "c1");
  EXPECT_EQ(MustParse(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none"})",
                      ApiKind::kChat)
                .tool_choice,
            ToolChoice::kNone);
}

TEST(OpenAiProtocolTest, ParsesLogitAdjustments) {
  const OpenAiRequest r = MustParse(
      R"({"prompt": "x", "presence_penalty": -1.5, "frequency_penalty": 0.5,
          "repetition_penalty": 1.1, "logit_bias": {"12": -100, "7": 2.5},
          "bad_words": ["foo", " bar"]})");
  EXPECT_DOUBLE_EQ(r.sampling.presence_penalty, -1.5);
  EXPECT_DOUBLE_EQ(r.sampling.frequency_penalty, 0.5);
  EXPECT_DOUBLE_EQ(r.sampling.repetition_penalty, 1.1);
  std::vector<std::pair<uint32_t, double>> bias = r.sampling.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<uint32_t, double>>{{7, 2.5}, {12, -100}}));
  EXPECT_EQ(r.sampling.bad_words, (std::vector<std::string>{"foo", " bar"}));
  const OpenAiRequest defaults = MustParse(R"({"prompt": "x"})");
  EXPECT_DOUBLE_EQ(defaults.sampling.repetition_penalty, 1.0);
  EXPECT_TRUE(defaults.sampling.logit_bias.empty());
}

// Every shape of structured output a client may send reaches the workers as one constraint.
TEST(OpenAiProtocolTest, ParsesStructuredOutputShapes) {
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  const OpenAiRequest formatted = MustParse(
      R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type":
          "json_schema", "json_schema": {"name": "n", "strict": true, "schema": )" +
          schema + "}}}",
      ApiKind::kChat);
  EXPECT_EQ(nlohmann::json::parse(formatted.sampling.structured.json_schema),
            nlohmann::json::parse(schema));
  EXPECT_EQ(MustParse(R"({"prompt": "x", "guided_json": ")" +
                      absl::StrReplaceAll(schema, {{"\"", "\\\""}}) + "\"}")
                .sampling.structured.json_schema,
            schema);  // a schema as its JSON text
  EXPECT_TRUE(MustParse(R"({"prompt": "x", "response_format": {"type": "json_object"}})")
                  .sampling.structured.json_object);
  EXPECT_EQ(
      MustParse(R"({"prompt": "x", "guided_choice": ["yes", "no"]})").sampling.structured.choice,
      (std::vector<std::string>{"yes", "no"}));
  EXPECT_EQ(MustParse(R"({"prompt": "x", "guided_regex": "\\d+"})").sampling.structured.regex,
            "\\d+");
  EXPECT_EQ(MustParse(R"({"prompt": "x", "structured_outputs": {"choice": ["a"]}})")
                .sampling.structured.choice,
            (std::vector<std::string>{"a"}));
  EXPECT_TRUE(MustParse(R"({"prompt": "x", "response_format": {"type": "text"}})")
                  .sampling.structured.empty());
}

// tool_choice "required" and a named function hold the output to the calls' JSON, which
// becomes tool_calls.
TEST(OpenAiProtocolTest, ForcedToolChoiceHoldsTheOutputToTheCalls) {
  const std::string messages = R"({"messages": [{"role": "user", "content": "x"}], )";
  const OpenAiRequest named =
      MustParse(messages + kTools + R"(, "tool_choice": {"type": "function", "function": {"name":
                              "get_weather"}}})",
                ApiKind::kChat);
  EXPECT_EQ(named.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(nlohmann::json::parse(named.sampling.structured.json_schema),
            nlohmann::json::parse(R"({"type": "object", "properties": {"city": {"type":
                                     "string"}}})"));
  const OpenAiRequest one =
      MustParse(messages + kTools + R"(, "tool_choice": "required", "parallel_tool_calls": false})",
                ApiKind::kChat);
  const auto schema = nlohmann::json::parse(one.sampling.structured.json_schema);
  EXPECT_EQ(schema["maxItems"], 1);
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["name"]["const"], "get_weather");

  auto calls = ForcedToolCalls(ToolChoice::kNamed, "get_weather", R"({"city":"Paris"})");
  ASSERT_TRUE(calls && calls->size() == 1);
  EXPECT_EQ((*calls)[0].name, "get_weather");
  EXPECT_EQ((*calls)[0].arguments, R"({"city": "Paris"})");  // as json.dumps writes it
  calls = ForcedToolCalls(ToolChoice::kRequired, "",
                          R"([{"name":"a","parameters":{"x":1}},{"name":"b","parameters":{}}])");
  ASSERT_TRUE(calls && calls->size() == 2);
  EXPECT_EQ((*calls)[1].index, 1);
  EXPECT_EQ((*calls)[1].arguments, "{}");
  EXPECT_NE((*calls)[0].id, (*calls)[1].id);
  EXPECT_FALSE(ForcedToolCalls(ToolChoice::kRequired, "", R"([{"name":"a","param)"));  // cut
}

ApiLogprobs TwoTokens() {
  ApiLogprobs logprobs;
  logprobs.text_offset = 5;
  logprobs.tokens.push_back({7, "He", std::nullopt, 1, {}});
  logprobs.tokens.push_back({9, "llo", -0.5f, 2, {{4, "y", -0.25f}, {9, "llo", -0.5f}}});
  return logprobs;
}

TEST(OpenAiProtocolTest, FormatsCompletionLogprobsAsOpenAi) {
  const ApiLogprobs logprobs = TwoTokens();
  const std::vector<ApiTokenLogprob> prompt{{9, "llo", -1.5f, 3, {{4, "y", -0.25f}}}};
  ApiChoice choice;
  choice.index = 1;
  choice.text = "xxxxxHello";
  choice.finish = ApiFinishReason::kLength;
  choice.logprobs = logprobs;
  choice.prompt_logprobs = prompt;
  json j =
      json::parse(FormatResponse(ApiKind::kCompletion, Header(),
                                 std::vector<ApiChoice>{ApiChoice{}, choice}, UsageCounts{3, 2}));
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_FALSE(j["choices"][0].contains("prompt_logprobs"));
  EXPECT_EQ(j["choices"][1]["index"], 1);
  const json& lp = j["choices"][1]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"He", "llo"}));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -0.5f);
  EXPECT_EQ(lp["text_offset"], json({5, 7}));
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_FLOAT_EQ(lp["top_logprobs"][1]["y"].get<float>(), -0.25f);
  EXPECT_FLOAT_EQ(lp["top_logprobs"][1]["llo"].get<float>(), -0.5f);
  const json& pl = j["choices"][1]["prompt_logprobs"];
  ASSERT_EQ(pl.size(), 2u);
  EXPECT_TRUE(pl[0].is_null());
  EXPECT_EQ(pl[1]["9"]["rank"], 3);
  EXPECT_EQ(pl[1]["9"]["decoded_token"], "llo");
  EXPECT_EQ(pl[1]["4"]["rank"], 1);
}

TEST(OpenAiProtocolTest, FormatsChatLogprobsAsOpenAi) {
  ApiLogprobs logprobs = TwoTokens();
  logprobs.tokens[0].logprob = -std::numeric_limits<float>::infinity();
  const std::string event = FormatStreamChunk(
      ApiKind::kChat, Header(),
      StreamDelta{.index = 2, .text = "Hello", .reasoning = "hm", .logprobs = &logprobs});
  json j = json::parse(event.substr(6, event.size() - 8));  // "data: {...}\n\n"
  EXPECT_EQ(j["choices"][0]["index"], 2);
  EXPECT_EQ(j["choices"][0]["delta"]["reasoning_content"], "hm");
  EXPECT_EQ(j["choices"][0]["delta"]["content"], "Hello");
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "He");
  EXPECT_EQ(content[0]["logprob"], -9999.0);  // JSON has no -inf
  EXPECT_EQ(content[0]["bytes"], json({72, 101}));
  EXPECT_EQ(content[1]["top_logprobs"][0]["token"], "y");
  EXPECT_FLOAT_EQ(content[1]["top_logprobs"][0]["logprob"].get<float>(), -0.25f);
  json none = json::parse(
      FormatResponse(ApiKind::kChat, Header(), "yo", ApiFinishReason::kStop, UsageCounts{1, 1}));
  EXPECT_TRUE(none["choices"][0]["logprobs"].is_null());
  EXPECT_FALSE(none.contains("prompt_logprobs"));
}

TEST(OpenAiProtocolTest, FormatsCompletionResponse) {
  json j = json::parse(FormatResponse(ApiKind::kCompletion, Header(), "hi",
                                      ApiFinishReason::kLength, UsageCounts{3, 2}));
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], "hi");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
}

TEST(OpenAiProtocolTest, FormatsChatResponse) {
  json j = json::parse(
      FormatResponse(ApiKind::kChat, Header(), "yo", ApiFinishReason::kStop, UsageCounts{1, 1}));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "yo");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

json ParseSse(const std::string& event) {
  EXPECT_EQ(event.rfind("data: ", 0), 0u);
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
  return json::parse(event.substr(6, event.size() - 8));
}

TEST(OpenAiProtocolTest, FormatsStreamChunks) {
  json c = ParseSse(
      FormatStreamChunk(ApiKind::kCompletion, Header(), "ab", ApiFinishReason::kNone, true));
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "ab");
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());

  json first =
      ParseSse(FormatStreamChunk(ApiKind::kChat, Header(), "", ApiFinishReason::kNone, true));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  json last =
      ParseSse(FormatStreamChunk(ApiKind::kChat, Header(), "", ApiFinishReason::kStop, false));
  EXPECT_TRUE(last["choices"][0]["delta"].is_object());
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");

  json usage = ParseSse(FormatUsageChunk(ApiKind::kCompletion, Header(), UsageCounts{4, 5}));
  EXPECT_TRUE(usage["choices"].is_array());
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 9);
}

TEST(OpenAiProtocolTest, BrokenUtf8InTextIsReplacedNotThrown) {
  std::string body = FormatResponse(ApiKind::kCompletion, Header(), "a\xff", ApiFinishReason::kStop,
                                    UsageCounts{});
  EXPECT_NO_THROW(json::parse(body));
}

}  // namespace
}  // namespace pdspark::router
