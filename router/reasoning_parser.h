// DeepSeek-V4's reasoning format, as vLLM's `--reasoning-parser deepseek_v4` reads it: in thinking
// mode the chat template opens the assistant turn with `<think>`, the model writes its reasoning,
// `</think>`, then the answer. The text splits into `reasoning_content` and `content`, delta by
// delta: the end tag may arrive cut across deltas, so a tail that could begin it is held back
// until the next delta (or Flush) settles it. Outside thinking mode all of it is content.
#pragma once

#include <string>
#include <string_view>

namespace pdspark::router {

class ReasoningParser {
 public:
  explicit ReasoningParser(bool thinking) : in_reasoning_(thinking) {}

  struct Delta {
    std::string reasoning;
    std::string content;
    bool empty() const { return reasoning.empty() && content.empty(); }
  };

  Delta Push(std::string_view text);
  // The end of the output: what is still held back.
  Delta Flush();

 private:
  bool in_reasoning_;
  bool started_ = false;  // a `<think>` the model repeats at the very start is dropped
  std::string held_;
};

}  // namespace pdspark::router
