#include "router/reasoning_parser.h"

#include "router/chat_template.h"
#include "router/partial_tag.h"

namespace pdspark::router {

ReasoningParser::Delta ReasoningParser::Push(std::string_view text) {
  Delta out;
  if (!in_reasoning_) {
    out.content = text;
    return out;
  }
  held_ += text;
  if (!started_) {
    const std::string_view start = kThinkStart;
    if (held_.size() < start.size() && start.substr(0, held_.size()) == held_) return out;
    if (held_.rfind(start, 0) == 0) held_.erase(0, start.size());
    started_ = true;
  }
  const size_t end = held_.find(kThinkEnd);
  if (end != std::string::npos) {
    out.reasoning = held_.substr(0, end);
    out.content = held_.substr(end + std::string_view(kThinkEnd).size());
    held_.clear();
    in_reasoning_ = false;
    return out;
  }
  const size_t keep = PartialTagAtEnd(held_, kThinkEnd);
  out.reasoning = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

ReasoningParser::Delta ReasoningParser::Flush() {
  Delta out;
  out.reasoning = std::move(held_);  // an unfinished tag, or the start tag's prefix: reasoning
  held_.clear();
  return out;
}

}  // namespace pdspark::router
