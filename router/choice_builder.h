// One choice of an OpenAI response, built from the request's chunks as they come: its text (the
// prompt's first when `echo`) and its logprobs in the API's shape, each token shown as its own
// text. A streaming front end sends each Add()'s part; a non-streaming one the whole choice.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "router/openai_protocol.h"
#include "router/reasoning_parser.h"
#include "router/request_handler.h"
#include "router/text_codec.h"
#include "router/tool_call_parser.h"

namespace pdspark::router {

struct ChoiceOptions {
  bool echo = false;
  std::optional<uint32_t> logprobs;         // alternatives per generated token; none: no logprobs
  std::optional<uint32_t> prompt_logprobs;  // vLLM's prompt_logprobs; none: not shown
  std::vector<uint32_t> prompt_ids;
  std::string prompt_text;  // what `echo` shows
  // Chat in thinking mode with a reasoning parser: the text splits into reasoning and content.
  bool reasoning = false;
  // Chat with tools and a tool-call parser: DSML calls become tool_calls.
  bool tool_calls = false;
  // tool_choice "required" or a named function (`forced_function`): the whole output is the
  // calls, in JSON (ForcedToolCalls), sent once it is complete.
  ToolChoice forced_tool_choice = ToolChoice::kAuto;
  std::string forced_function;
};

// What one chunk adds to the choice.
struct ChoicePart {
  std::string text;
  std::string reasoning;
  std::vector<ToolCallDelta> tool_calls;
  std::optional<ApiLogprobs> logprobs;
};

class ChoiceBuilder {
 public:
  ChoiceBuilder(ChoiceOptions options, const TextCodec& codec);

  ChoicePart Add(const TokenChunk& chunk);
  // The end of the output: text the reasoning parser held back.
  ChoicePart Finish();

  // The content (all the text without a reasoning parser), and the reasoning when parsed.
  const std::string& text() const { return text_; }
  const std::optional<std::string>& reasoning() const { return reasoning_; }
  // Whole calls, their argument pieces joined.
  const std::vector<ToolCallDelta>& tool_calls() const { return tool_calls_; }
  // The turn ends by calling tools (finish reason "tool_calls"); a named function's call ends
  // it with "stop", as OpenAI's.
  bool ends_in_tool_calls() const {
    return !tool_calls_.empty() && options_.forced_tool_choice != ToolChoice::kNamed;
  }

  // Null when the request asked for none.
  const ApiLogprobs* logprobs() const { return logprobs_ ? &*logprobs_ : nullptr; }
  const std::vector<ApiTokenLogprob>* prompt_logprobs() const {
    return prompt_logprobs_ ? &*prompt_logprobs_ : nullptr;
  }
  // The sum of the generated tokens' logprobs the chunks carried (best_of ranks by it).
  double cumulative_logprob() const { return cumulative_logprob_; }

 private:
  ApiTokenLogprob ToApi(const v1::TokenLogprob& logprob, uint32_t max_top) const;
  // The content the parsers make of `text` (the reasoning parser's content, then the tool-call
  // parser's), into `part`; `flush` at the end of the output.
  void SplitContent(std::string_view text, bool flush, ChoicePart* part);
  // The echoed prompt's logprobs: none for its first token, then the engine's.
  void AddPromptPositions(const TokenChunk& chunk, ApiLogprobs* part) const;

  const ChoiceOptions options_;
  const TextCodec& codec_;
  bool started_ = false;
  std::optional<ReasoningParser> parser_;
  std::optional<ToolCallParser> tool_parser_;
  std::vector<ToolCallDelta> tool_calls_;
  std::string forced_output_;  // a forced tool choice's output so far
  std::string text_;
  std::optional<std::string> reasoning_;
  size_t text_characters_ = 0;  // completions' text_offset unit
  double cumulative_logprob_ = 0;
  std::optional<ApiLogprobs> logprobs_;
  std::optional<std::vector<ApiTokenLogprob>> prompt_logprobs_;
};

}  // namespace pdspark::router
