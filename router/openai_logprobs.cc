#include "router/openai_logprobs.h"

#include <algorithm>
#include <string>

namespace pdspark::router {
namespace {

using nlohmann::json;

// JSON has no -inf: chat shows it as -9999.0, as OpenAI and vLLM do.
constexpr float kMinChatLogprob = -9999.0f;

json Bytes(const std::string& token) {
  json bytes = json::array();
  for (unsigned char c : token) bytes.push_back(static_cast<int>(c));
  return bytes;
}

json NullableLogprob(const std::optional<float>& logprob) {
  if (!logprob) return nullptr;
  return std::max(*logprob, kMinChatLogprob);
}

json CompletionLogprobs(const ApiLogprobs& logprobs) {
  json tokens = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  size_t offset = logprobs.text_offset;
  for (const ApiTokenLogprob& t : logprobs.tokens) {
    tokens.push_back(t.token);
    values.push_back(NullableLogprob(t.logprob));
    offsets.push_back(offset);
    offset += CharacterCount(t.token);
    if (!t.logprob) {
      tops.push_back(nullptr);
      continue;
    }
    // As vLLM: the alternatives and the chosen token, keyed by their text. Two tokens can read
    // alike (partial characters are all U+FFFD): the more likely one keeps the key.
    json top = json::object();
    for (const ApiTopLogprob& alt : t.top) {
      top.emplace(alt.token, std::max(alt.logprob, kMinChatLogprob));
    }
    top.emplace(t.token, std::max(*t.logprob, kMinChatLogprob));
    tops.push_back(std::move(top));
  }
  return {{"text_offset", std::move(offsets)},
          {"token_logprobs", std::move(values)},
          {"tokens", std::move(tokens)},
          {"top_logprobs", std::move(tops)}};
}

json ChatLogprobs(const ApiLogprobs& logprobs) {
  json content = json::array();
  for (const ApiTokenLogprob& t : logprobs.tokens) {
    json top = json::array();
    for (const ApiTopLogprob& alt : t.top) {
      top.push_back({{"token", alt.token},
                     {"logprob", std::max(alt.logprob, kMinChatLogprob)},
                     {"bytes", Bytes(alt.token)}});
    }
    content.push_back({{"token", t.token},
                       {"logprob", NullableLogprob(t.logprob)},
                       {"bytes", Bytes(t.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

}  // namespace

size_t CharacterCount(std::string_view text) {
  // Every byte but a continuation byte (10xxxxxx) starts a character.
  return static_cast<size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

json LogprobsJson(ApiKind kind, const ApiLogprobs& logprobs) {
  return kind == ApiKind::kCompletion ? CompletionLogprobs(logprobs) : ChatLogprobs(logprobs);
}

json PromptLogprobsJson(const std::vector<ApiTokenLogprob>& prompt_logprobs) {
  json out = json::array({nullptr});  // the first prompt token has nothing before it
  for (const ApiTokenLogprob& t : prompt_logprobs) {
    json position = json::object();
    for (size_t i = 0; i < t.top.size(); ++i) {
      const ApiTopLogprob& alt = t.top[i];
      position[std::to_string(alt.token_id)] = {{"logprob", std::max(alt.logprob, kMinChatLogprob)},
                                                {"rank", i + 1},
                                                {"decoded_token", alt.token}};
    }
    position[std::to_string(t.token_id)] = {
        {"logprob", NullableLogprob(t.logprob)}, {"rank", t.rank}, {"decoded_token", t.token}};
    out.push_back(std::move(position));
  }
  return out;
}

}  // namespace pdspark::router
