#include "router/chat_template.h"

#include "absl/strings/str_cat.h"

namespace pdspark::router {
namespace {

bool IsUserLike(const ChatMessage& m) { return m.role == "user" || m.role == "developer"; }

int LastUserIndex(const std::vector<ChatMessage>& messages) {
  for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i) {
    if (IsUserLike(messages[i])) return i;
  }
  return -1;
}

// The assistant opening after a user turn: `</think>` in chat mode and for past turns, `<think>`
// for the turn the model is about to write in thinking mode.
std::string AssistantOpening(bool thinking, bool is_last_user) {
  return absl::StrCat(kAssistantToken, thinking && is_last_user ? kThinkStart : kThinkEnd);
}

}  // namespace

StatusOr<std::string> EncodeDeepSeekV4Chat(const std::vector<ChatMessage>& messages,
                                           const ChatTemplateOptions& options) {
  std::string prompt = options.add_bos ? kBosToken : "";
  const int last_user = LastUserIndex(messages);
  for (int i = 0; i < static_cast<int>(messages.size()); ++i) {
    const ChatMessage& m = messages[i];
    // Thinking mode drops developer turns that precede the last user turn, like the encoder.
    if (options.thinking && m.role == "developer" && i < last_user) continue;
    if (m.role == "system") {
      prompt += m.content;
    } else if (IsUserLike(m)) {
      if (m.role == "developer" && m.content.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("messages[", i, "]: empty developer message"));
      }
      absl::StrAppend(&prompt, kUserToken, m.content);
    } else if (m.role == "assistant") {
      // Reasoning is kept only for assistant turns after the last user turn (in progress).
      if (options.thinking && i > last_user) {
        absl::StrAppend(&prompt, m.reasoning_content, kThinkEnd);
      }
      absl::StrAppend(&prompt, m.content, kEosToken);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("messages[", i, "]: unsupported role '",
                                                     m.role, "'"));
    }
    // A user turn followed by an assistant turn (or ending the conversation) opens the
    // assistant turn; consecutive user turns are simply concatenated.
    const bool last = i + 1 == static_cast<int>(messages.size());
    if (IsUserLike(m) && (last ? options.add_generation_prompt
                               : messages[i + 1].role == "assistant")) {
      prompt += AssistantOpening(options.thinking, i == last_user);
    }
  }
  return prompt;
}

}  // namespace pdspark::router
