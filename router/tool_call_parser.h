// The model's DSML tool calls (router/dsml.h) turned into OpenAI tool calls as the text streams
// (vLLM's `--tool-call-parser deepseek_v4`): text outside a `<｜DSML｜tool_calls>` block stays
// content (the "\n\n" before the block is the format's, not content); each invoke becomes a call
// with an id and its name, then its arguments as a JSON object, one parameter per delta
// (`{"city": "Paris"` … `}`), so streamed and whole answers carry the same string. A string
// parameter becomes a JSON string; any other value is kept when it is JSON, else quoted. Text that
// could begin a tag is held back until the next delta settles it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "router/openai_protocol.h"

namespace pdspark::router {

// A fresh OpenAI tool call id, `call_` and 24 hex digits.
std::string NewCallId();

class ToolCallParser {
 public:
  struct Delta {
    std::string content;
    std::vector<ToolCallDelta> calls;
  };

  Delta Push(std::string_view text);
  // The end of the output: held-back content; an invoke cut off by max_tokens gets its `}`.
  Delta Flush();

 private:
  enum class State { kContent, kBlock, kInvoke, kBroken };

  void ParseContent(Delta& out);
  // One step inside a block; false when it needs more text.
  bool StepBlock(Delta& out);
  bool StepInvoke(Delta& out);
  // Malformed markup: the rest is content, as vLLM answers output it cannot parse.
  void Break(Delta& out);

  State state_ = State::kContent;
  std::string buffer_;
  int calls_ = 0;
  int parameters_ = 0;  // of the open invoke
};

}  // namespace pdspark::router
