#include "router/choice_builder.h"

#include <algorithm>

#include "router/openai_tools.h"

namespace pdspark::router {
namespace {

// A token's own text, as vLLM shows it (one token alone: a partial character is U+FFFD).
std::string TokenText(const TextCodec& codec, uint32_t id) {
  return DecodeAll(codec, std::span<const uint32_t>(&id, 1));
}

}  // namespace

ChoiceBuilder::ChoiceBuilder(ChoiceOptions options, const TextCodec& codec)
    : options_(std::move(options)), codec_(codec) {
  if (options_.logprobs) logprobs_.emplace();
  if (options_.reasoning) {
    parser_.emplace(/*thinking=*/true);
    reasoning_.emplace();
  }
  if (options_.tool_calls) tool_parser_.emplace();
}

void ChoiceBuilder::SplitContent(std::string_view text, bool flush, ChoicePart* part) {
  if (options_.forced_tool_choice == ToolChoice::kRequired ||
      options_.forced_tool_choice == ToolChoice::kNamed) {
    forced_output_ += text;
    if (!flush) return;
    auto calls =
        ForcedToolCalls(options_.forced_tool_choice, options_.forced_function, forced_output_);
    if (!calls) {
      part->text = std::move(forced_output_);
      return;
    }
    tool_calls_ = *calls;
    part->tool_calls = std::move(*calls);
    return;
  }
  std::string content(text);
  if (parser_) {
    ReasoningParser::Delta split = flush ? parser_->Flush() : parser_->Push(text);
    content = std::move(split.content);
    part->reasoning = std::move(split.reasoning);
    *reasoning_ += part->reasoning;
  }
  if (tool_parser_) {
    ToolCallParser::Delta calls = tool_parser_->Push(content);
    if (flush) {
      ToolCallParser::Delta rest = tool_parser_->Flush();
      calls.content += rest.content;
      calls.calls.insert(calls.calls.end(), rest.calls.begin(), rest.calls.end());
    }
    content = std::move(calls.content);
    for (const ToolCallDelta& piece : calls.calls) {
      if (!piece.id.empty())
        tool_calls_.push_back(piece);
      else
        tool_calls_[piece.index].arguments += piece.arguments;
    }
    part->tool_calls = std::move(calls.calls);
  }
  part->text += content;
}

ApiTokenLogprob ChoiceBuilder::ToApi(const v1::TokenLogprob& logprob, uint32_t max_top) const {
  ApiTokenLogprob out;
  out.token_id = logprob.token_id();
  out.token = TokenText(codec_, logprob.token_id());
  out.logprob = logprob.logprob();
  out.rank = logprob.rank();
  const int top = std::min<int>(logprob.top_size(), static_cast<int>(max_top));
  for (int i = 0; i < top; ++i) {
    const v1::TopLogprob& alt = logprob.top(i);
    out.top.push_back({alt.token_id(), TokenText(codec_, alt.token_id()), alt.logprob()});
  }
  return out;
}

void ChoiceBuilder::AddPromptPositions(const TokenChunk& chunk, ApiLogprobs* part) const {
  if (options_.prompt_ids.empty()) return;
  ApiTokenLogprob first;
  first.token_id = options_.prompt_ids.front();
  first.token = TokenText(codec_, first.token_id);
  part->tokens.push_back(std::move(first));
  for (const v1::TokenLogprob& p : chunk.prompt_logprobs) {
    part->tokens.push_back(ToApi(p, *options_.logprobs));
  }
}

ChoicePart ChoiceBuilder::Add(const TokenChunk& chunk) {
  ChoicePart part;
  const bool first = !started_;
  started_ = true;
  if (first && options_.echo) part.text = options_.prompt_text;
  SplitContent(chunk.text, /*flush=*/false, &part);
  for (const v1::TokenLogprob& t : chunk.logprobs) cumulative_logprob_ += t.logprob();
  if (logprobs_) {
    part.logprobs.emplace();
    part.logprobs->text_offset = text_characters_;
    if (first && options_.echo) AddPromptPositions(chunk, &*part.logprobs);
    for (const v1::TokenLogprob& t : chunk.logprobs) {
      part.logprobs->tokens.push_back(ToApi(t, *options_.logprobs));
    }
    logprobs_->tokens.insert(logprobs_->tokens.end(), part.logprobs->tokens.begin(),
                             part.logprobs->tokens.end());
  }
  if (first && options_.prompt_logprobs) {
    prompt_logprobs_.emplace();
    for (const v1::TokenLogprob& p : chunk.prompt_logprobs) {
      prompt_logprobs_->push_back(ToApi(p, *options_.prompt_logprobs));
    }
  }
  text_ += part.text;
  text_characters_ += CharacterCount(part.text);
  return part;
}

ChoicePart ChoiceBuilder::Finish() {
  ChoicePart part;
  SplitContent("", /*flush=*/true, &part);
  text_ += part.text;
  text_characters_ += CharacterCount(part.text);
  return part;
}

}  // namespace pdspark::router
