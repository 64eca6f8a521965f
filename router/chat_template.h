// The DeepSeek-V4 chat encoding (the release's `encoding/encoding_dsv4.py`) for system,
// developer, user, assistant and tool turns, with tools (router/dsml.h); tasks and reminders are
// not rendered here.
//
//   <｜begin▁of▁sentence｜>{system}<｜User｜>{user}<｜Assistant｜></think>{assistant}<｜end▁of▁sentence｜>
//   <｜User｜>{user}<｜Assistant｜></think>
//
// In chat (non-thinking) mode every assistant turn is opened with `</think>`, meaning "no
// reasoning"; in thinking mode the turn being generated is opened with `<think>` instead and
// earlier assistant turns drop their reasoning (the encoder's default drop_thinking). With tools,
// the "## Tools" section follows the first system message (one is added when there is none),
// assistant turns end with their DSML tool calls, tool results become one user turn of
// `<tool_result>…</tool_result>` blocks, and thinking mode keeps every turn's reasoning.
#pragma once

#include <string>
#include <vector>

#include "common/base/status.h"
#include "router/openai_protocol.h"

namespace pdspark::router {

inline constexpr char kBosToken[] = "<｜begin▁of▁sentence｜>";
inline constexpr char kEosToken[] = "<｜end▁of▁sentence｜>";
inline constexpr char kUserToken[] = "<｜User｜>";
inline constexpr char kAssistantToken[] = "<｜Assistant｜>";
inline constexpr char kThinkStart[] = "<think>";
inline constexpr char kThinkEnd[] = "</think>";

struct ChatTemplateOptions {
  bool thinking = false;
  bool add_bos = true;
  // When the last turn is the user's, open the assistant turn the model will generate.
  bool add_generation_prompt = true;
  // OpenAiRequest::tools: each tool's function object as the prompt shows it.
  std::vector<std::string> tools;
};

// Renders `messages` into the prompt text; InvalidArgument for roles or shapes the encoding
// does not allow (e.g. an empty developer message).
StatusOr<std::string> EncodeDeepSeekV4Chat(const std::vector<ChatMessage>& messages,
                                           const ChatTemplateOptions& options);

}  // namespace pdspark::router
