#include "router/chat_template.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "router/dsml.h"

namespace pdspark::router {
namespace {

// One turn of the prompt: a message, or tool results (with a user message after them) merged
// into one user turn as the encoder merges them.
struct Turn {
  const ChatMessage* message = nullptr;  // null: merged tool results
  std::vector<std::string> blocks;       // merged: "<tool_result>…</tool_result>" or user text
  std::string role() const { return message ? message->role : "user"; }
};

bool IsUserLike(const std::string& role) { return role == "user" || role == "developer"; }

// Tool results join one user turn, ordered as the assistant turn before them made the calls; a
// user message right after them joins it too.
StatusOr<std::vector<Turn>> MergeToolResults(const std::vector<ChatMessage>& messages) {
  std::vector<Turn> turns;
  const ChatMessage* caller = nullptr;  // the assistant turn the results answer
  std::vector<std::pair<size_t, std::string>> results;
  auto flush = [&] {
    std::stable_sort(results.begin(), results.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [order, block] : results) turns.back().blocks.push_back(std::move(block));
    results.clear();
  };
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      if (caller == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("messages[", i,
                         "]: a tool message must follow an assistant message "
                         "with tool_calls"));
      }
      if (turns.back().message != nullptr) turns.emplace_back();
      size_t order = 0;  // unknown ids first, as the encoder sorts them
      for (size_t c = 0; c < caller->tool_calls.size(); ++c) {
        if (caller->tool_calls[c].id == m.tool_call_id) order = c;
      }
      results.emplace_back(order, absl::StrCat(kToolResultStart, m.content, kToolResultEnd));
      continue;
    }
    if (!results.empty()) flush();
    if (m.role == "user" && !turns.empty() && turns.back().message == nullptr) {
      turns.back().blocks.push_back(m.content);
      continue;
    }
    caller = m.role == "assistant" && !m.tool_calls.empty() ? &m : nullptr;
    turns.push_back(Turn{&m, {}});
  }
  if (!results.empty()) flush();
  return turns;
}

}  // namespace

StatusOr<std::string> EncodeDeepSeekV4Chat(const std::vector<ChatMessage>& messages,
                                           const ChatTemplateOptions& options) {
  // The tools ride on the first system (or developer) message, or on an empty system message.
  std::vector<ChatMessage> with_tools;
  const std::vector<ChatMessage>* source = &messages;
  if (!options.tools.empty() &&
      (messages.empty() || (messages[0].role != "system" && messages[0].role != "developer"))) {
    with_tools.push_back(ChatMessage{"system", "", "", {}, ""});
    with_tools.insert(with_tools.end(), messages.begin(), messages.end());
    source = &with_tools;
  }
  ASSIGN_OR_RETURN(const std::vector<Turn> turns, MergeToolResults(*source));
  const std::string tools =
      options.tools.empty() ? "" : absl::StrCat("\n\n", RenderToolsSection(options.tools));
  // With tools every turn keeps its reasoning (the encoder turns drop_thinking off).
  const bool drop_thinking = options.thinking && options.tools.empty();
  int last_user = -1;
  for (int i = 0; i < static_cast<int>(turns.size()); ++i) {
    if (IsUserLike(turns[i].role())) last_user = i;
  }

  std::string prompt = options.add_bos ? kBosToken : "";
  for (int i = 0; i < static_cast<int>(turns.size()); ++i) {
    const Turn& turn = turns[i];
    const std::string role = turn.role();
    const ChatMessage* m = turn.message;
    // Thinking mode drops developer turns that precede the last user turn, like the encoder.
    if (drop_thinking && role == "developer" && i < last_user) continue;
    if (m == nullptr) {
      absl::StrAppend(&prompt, kUserToken, absl::StrJoin(turn.blocks, "\n\n"));
    } else if (role == "system") {
      absl::StrAppend(&prompt, m->content, i == 0 ? tools : "");
    } else if (IsUserLike(role)) {
      if (role == "developer" && m->content.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("messages[", i, "]: empty developer message"));
      }
      absl::StrAppend(&prompt, kUserToken, m->content, i == 0 ? tools : "");
    } else if (role == "assistant") {
      // Reasoning is kept for assistant turns after the last user turn (in progress), and for
      // every turn when tools are given.
      if (options.thinking && (!drop_thinking || i > last_user)) {
        absl::StrAppend(&prompt, m->reasoning_content, kThinkEnd);
      }
      absl::StrAppend(&prompt, m->content,
                      m->tool_calls.empty() ? "" : RenderToolCalls(m->tool_calls), kEosToken);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "]: unsupported role '", role, "'"));
    }
    // A user turn followed by an assistant turn (or ending the conversation) opens the
    // assistant turn; consecutive user turns are simply concatenated.
    const bool last = i + 1 == static_cast<int>(turns.size());
    if (IsUserLike(role) &&
        (last ? options.add_generation_prompt : turns[i + 1].role() == "assistant")) {
      const bool think = options.thinking && (!drop_thinking || i == last_user);
      absl::StrAppend(&prompt, kAssistantToken, think ? kThinkStart : kThinkEnd);
    }
  }
  return prompt;
}

}  // namespace pdspark::router
