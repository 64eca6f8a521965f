// One OpenAI completions or chat request from its parsed body to its answer:
//   - the prompts' token ids (completion text or ids, or the chat template's text);
//   - one router request per sample: n per prompt, or best_of to pick the n with the highest
//     cumulative logprob from; a seeded request's sample i uses seed + i, as vLLM;
//   - every sample admitted, or none (the first refusal is the answer), then run side by side;
//   - the answer: one JSON body with every choice, or one SSE stream whose events carry their
//     choice's index, with the usage of all of them; with a reasoning parser, chat in thinking
//     mode answers the reasoning apart from the content, and with a tool-call parser the DSML
//     calls as tool_calls (finish reason "tool_calls").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/base/task.h"
#include "router/choice_builder.h"
#include "router/client_stream.h"
#include "router/openai_protocol.h"
#include "router/request_handler.h"

namespace pdspark::router {

// The prompts' token ids, in order (one for chat).
std::variant<std::vector<std::vector<uint32_t>>, ApiError> PromptIds(const OpenAiRequest& request,
                                                                     const TextCodec& codec);

class OpenAiGeneration {
 public:
  // What the router makes of chat output (its --reasoning-parser, --tool-call-parser).
  struct Parsers {
    bool reasoning = false;   // thinking mode: reasoning_content apart from content
    bool tool_calls = false;  // with tools and tool_choice auto: DSML calls become tool_calls
  };
  static std::variant<std::unique_ptr<OpenAiGeneration>, ApiError> Admit(
      RequestHandler& handler, const OpenAiRequest& request,
      const std::vector<std::vector<uint32_t>>& prompt_ids, ResponseHeader header, Parsers parsers);

  // Runs every sample; the response body, or the first failed sample's error. `client` tells
  // when the client has hung up (the samples are cancelled then).
  Task<std::variant<std::string, ApiError>> Collect(const ClientStream& client);
  // Runs every sample, writing the SSE events (the last one [DONE]) to `client`.
  Task<void> Stream(ClientStream& client);

 private:
  struct Sample {
    std::unique_ptr<AdmittedRequest> request;
    ChoiceOptions choice;
    uint32_t prompt = 0;
    uint32_t index = 0;  // the choice index it streams as (best_of picks the index at the end)
    GenerateOutcome outcome;
  };

  OpenAiGeneration(RequestHandler& handler, const OpenAiRequest& request, ResponseHeader header)
      : handler_(handler),
        kind_(request.kind),
        n_(request.n),
        include_usage_(request.include_usage),
        header_(std::move(header)) {}

  // One sample of Collect, gathered into `choice`.
  Task<void> CollectSample(Sample& sample, ChoiceBuilder& choice, const ClientStream& client);
  // One sample of Stream, written as its choice's events.
  Task<void> StreamSample(Sample& sample, ClientStream& client);
  // The n samples of each prompt that become its choices, in choice order.
  std::vector<const Sample*> Chosen(const std::vector<ChoiceBuilder>& built) const;
  UsageCounts Usage(const std::vector<const Sample*>& chosen) const;

  RequestHandler& handler_;
  const ApiKind kind_;
  const uint32_t n_;
  const bool include_usage_;
  const ResponseHeader header_;
  std::vector<uint32_t> prompt_tokens_;  // per prompt
  std::vector<Sample> samples_;          // prompt-major
};

}  // namespace pdspark::router
