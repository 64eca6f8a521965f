#include "router/openai_generation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "router/chat_template.h"

namespace pdspark::router {
namespace {

ApiError InvalidPrompt(const Status& status, const std::string& param) {
  return ApiError{400, std::string(status.message()), "invalid_request_error", param,
                  "invalid_value"};
}

// Gathers one sample's choice; notices a client that hung up meanwhile.
class CollectingObserver : public StreamObserver {
 public:
  CollectingObserver(const ClientStream& client, ChoiceBuilder* choice)
      : client_(client), choice_(choice) {}
  bool OnChunk(const TokenChunk& chunk) override {
    choice_->Add(chunk);
    return true;
  }
  bool ClientGone() const override { return client_.Gone(); }

 private:
  const ClientStream& client_;
  ChoiceBuilder* choice_;
};

// A turn that ended by calling tools finishes with "tool_calls", as OpenAI's.
ApiFinishReason FinishOf(const ChoiceBuilder& choice, ApiFinishReason finish) {
  return finish == ApiFinishReason::kStop && choice.ends_in_tool_calls()
             ? ApiFinishReason::kToolCalls
             : finish;
}

// Streams one sample's chunks that carry text or logprobs as its choice's events, into the
// stream every sample of the request writes.
class SseObserver : public StreamObserver {
 public:
  SseObserver(ApiKind kind, const ResponseHeader& header, uint32_t index, ChoiceBuilder choice,
              ClientStream& client)
      : kind_(kind), header_(header), index_(index), choice_(std::move(choice)), client_(client) {}

  bool OnChunk(const TokenChunk& chunk) override { return Send(choice_.Add(chunk)); }
  // The end of the output: what the parsers held back, then the finish reason.
  void Finish(ApiFinishReason finish) {
    Send(choice_.Finish());
    client_.Write(FormatStreamChunk(
        kind_, header_, StreamDelta{.index = index_, .finish = FinishOf(choice_, finish)}));
  }
  bool ClientGone() const override { return client_.Gone(); }
  void WhenWritable(std::function<void()> ready) override {
    client_.WhenWritable(std::move(ready));
  }

 private:
  bool Send(const ChoicePart& part) {
    if (part.text.empty() && part.reasoning.empty() && part.tool_calls.empty() && !part.logprobs) {
      return !client_.Gone();
    }
    return client_.Write(
        FormatStreamChunk(kind_, header_,
                          StreamDelta{.index = index_,
                                      .text = part.text,
                                      .reasoning = part.reasoning,
                                      .tool_calls = &part.tool_calls,
                                      .logprobs = part.logprobs ? &*part.logprobs : nullptr}));
  }

  ApiKind kind_;
  const ResponseHeader& header_;
  uint32_t index_;
  ChoiceBuilder choice_;
  ClientStream& client_;
};

// What `echo` shows of a prompt: its text as sent, or its ids' text.
std::string EchoText(const CompletionPrompt& prompt, const std::vector<uint32_t>& ids,
                     const TextCodec& codec) {
  return prompt.text ? *prompt.text : DecodeAll(codec, ids);
}

std::string SampleId(const OpenAiRequest& request, size_t prompt, uint32_t sample) {
  if (request.request_id.empty()) return "";  // the router makes one
  std::string id = request.request_id;
  if (request.prompts.size() > 1) id = absl::StrCat(id, "-", prompt);
  if (request.best_of > 1) id = absl::StrCat(sample, "_", id);
  return id;
}

}  // namespace

std::variant<std::vector<std::vector<uint32_t>>, ApiError> PromptIds(const OpenAiRequest& request,
                                                                     const TextCodec& codec) {
  std::vector<std::vector<uint32_t>> all;
  if (request.kind == ApiKind::kCompletion) {
    for (const CompletionPrompt& prompt : request.prompts) {
      if (!prompt.text) {
        all.push_back(prompt.token_ids);
        continue;
      }
      // As vLLM: BOS first, special-token strings in the text are parsed.
      StatusOr<std::vector<uint32_t>> ids = codec.Encode(*prompt.text, true);
      if (!ids.ok()) return InvalidPrompt(ids.status(), "prompt");
      if (auto bos = codec.bos_token_id(); bos && (ids->empty() || ids->front() != *bos)) {
        ids->insert(ids->begin(), *bos);
      }
      all.push_back(*std::move(ids));
    }
    return all;
  }
  ChatTemplateOptions options;
  options.thinking = request.thinking;
  options.add_generation_prompt = request.add_generation_prompt;
  options.tools = request.tools;
  StatusOr<std::string> text = EncodeDeepSeekV4Chat(request.messages, options);
  if (!text.ok()) return InvalidPrompt(text.status(), "messages");
  StatusOr<std::vector<uint32_t>> ids = codec.Encode(*text, true);
  if (!ids.ok()) return InvalidPrompt(ids.status(), "messages");
  all.push_back(*std::move(ids));
  return all;
}

std::variant<std::unique_ptr<OpenAiGeneration>, ApiError> OpenAiGeneration::Admit(
    RequestHandler& handler, const OpenAiRequest& request,
    const std::vector<std::vector<uint32_t>>& prompt_ids, ResponseHeader header, Parsers parsers) {
  std::unique_ptr<OpenAiGeneration> generation(
      new OpenAiGeneration(handler, request, std::move(header)));
  for (size_t p = 0; p < prompt_ids.size(); ++p) {
    generation->prompt_tokens_.push_back(static_cast<uint32_t>(prompt_ids[p].size()));
    ChoiceOptions choice;
    choice.echo = request.echo;
    choice.logprobs = request.sampling.logprobs;
    choice.prompt_logprobs = request.prompt_logprobs;
    const bool chat = request.kind == ApiKind::kChat;
    choice.reasoning = parsers.reasoning && chat && request.thinking;
    choice.tool_calls = parsers.tool_calls && chat && !request.tools.empty() &&
                        request.tool_choice == ToolChoice::kAuto;
    choice.forced_tool_choice = request.tool_choice;
    choice.forced_function = request.tool_choice_function;
    if (request.echo) {
      choice.prompt_ids = prompt_ids[p];
      choice.prompt_text = EchoText(request.prompts[p], prompt_ids[p], handler.codec());
    }
    for (uint32_t j = 0; j < request.best_of; ++j) {
      GenerateInput input;
      input.request_id = SampleId(request, p, j);
      input.prompt_ids = prompt_ids[p];
      input.sampling = request.sampling;
      if (input.sampling.seed) *input.sampling.seed += j;
      // best_of ranks the samples by the logprobs of what they sampled.
      if (request.best_of > request.n) input.sampling.logprobs = choice.logprobs.value_or(0);
      input.default_max_tokens_to_context = request.kind == ApiKind::kChat;
      input.prompt_param = request.kind == ApiKind::kChat ? "messages" : "prompt";
      auto admitted = handler.Admit(std::move(input));
      if (auto* e = std::get_if<ApiError>(&admitted)) return *e;  // the admitted ones let go
      generation->samples_.push_back(
          Sample{std::get<std::unique_ptr<AdmittedRequest>>(std::move(admitted)),
                 choice,
                 static_cast<uint32_t>(p),
                 static_cast<uint32_t>(p * request.n + j),
                 {}});
    }
  }
  return generation;
}

std::vector<const OpenAiGeneration::Sample*> OpenAiGeneration::Chosen(
    const std::vector<ChoiceBuilder>& built) const {
  std::vector<const Sample*> chosen;
  const size_t per_prompt = samples_.size() / prompt_tokens_.size();
  for (size_t first = 0; first < samples_.size(); first += per_prompt) {
    std::vector<size_t> order(per_prompt);
    for (size_t j = 0; j < per_prompt; ++j) order[j] = first + j;
    // Highest cumulative logprob first; the earlier sample on a tie.
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return built[a].cumulative_logprob() > built[b].cumulative_logprob();
    });
    for (uint32_t j = 0; j < n_; ++j) chosen.push_back(&samples_[order[j]]);
  }
  return chosen;
}

UsageCounts OpenAiGeneration::Usage(const std::vector<const Sample*>& chosen) const {
  UsageCounts usage;
  for (uint32_t tokens : prompt_tokens_) usage.prompt_tokens += tokens;
  for (const Sample* s : chosen) usage.completion_tokens += s->outcome.usage.completion_tokens;
  // Each prompt's reuse, as its first sample saw it.
  const size_t per_prompt = samples_.size() / prompt_tokens_.size();
  for (size_t p = 0; p < prompt_tokens_.size(); ++p) {
    usage.cached_tokens += samples_[p * per_prompt].outcome.usage.cached_tokens;
  }
  return usage;
}

Task<void> OpenAiGeneration::CollectSample(Sample& sample, ChoiceBuilder& choice,
                                           const ClientStream& client) {
  CollectingObserver observer(client, &choice);
  sample.outcome = co_await handler_.Run(*sample.request, observer);
  sample.request.reset();  // frees its admission slot now
  choice.Finish();
}

Task<std::variant<std::string, ApiError>> OpenAiGeneration::Collect(const ClientStream& client) {
  std::vector<ChoiceBuilder> built;
  for (const Sample& s : samples_) built.emplace_back(s.choice, handler_.codec());
  std::vector<Task<void>> runs;
  for (size_t i = 0; i < samples_.size(); ++i) {
    runs.push_back(CollectSample(samples_[i], built[i], client));
  }
  co_await WhenAll(std::move(runs));
  for (const Sample& s : samples_) {
    if (s.outcome.error) co_return *s.outcome.error;
  }
  const std::vector<const Sample*> chosen = Chosen(built);
  std::vector<ApiChoice> choices;
  for (size_t i = 0; i < chosen.size(); ++i) {
    const ChoiceBuilder& b = built[chosen[i] - samples_.data()];
    ApiChoice& c = choices.emplace_back();
    c.index = static_cast<uint32_t>(i);
    c.text = b.text();
    c.reasoning = b.reasoning();
    c.tool_calls = b.tool_calls();
    c.finish = FinishOf(b, chosen[i]->outcome.finish);
    if (b.logprobs()) c.logprobs = *b.logprobs();
    if (b.prompt_logprobs()) c.prompt_logprobs = *b.prompt_logprobs();
  }
  co_return FormatResponse(kind_, header_, choices, Usage(chosen));
}

Task<void> OpenAiGeneration::StreamSample(Sample& sample, ClientStream& client) {
  SseObserver observer(kind_, header_, sample.index, ChoiceBuilder(sample.choice, handler_.codec()),
                       client);
  sample.outcome = co_await handler_.Run(*sample.request, observer);
  sample.request.reset();
  if (!sample.outcome.error) observer.Finish(sample.outcome.finish);
}

Task<void> OpenAiGeneration::Stream(ClientStream& client) {
  if (kind_ == ApiKind::kChat) {
    for (const Sample& s : samples_) {
      client.Write(FormatStreamChunk(kind_, header_, StreamDelta{.index = s.index, .first = true}));
    }
  }
  std::vector<Task<void>> runs;
  for (Sample& s : samples_) runs.push_back(StreamSample(s, client));
  co_await WhenAll(std::move(runs));
  std::vector<const Sample*> all;
  const ApiError* error = nullptr;
  for (const Sample& s : samples_) {
    all.push_back(&s);
    if (s.outcome.error && error == nullptr) error = &*s.outcome.error;
  }
  if (error != nullptr) {
    client.Write(FormatStreamError(*error));
  } else if (include_usage_) {
    client.Write(FormatUsageChunk(kind_, header_, Usage(all)));
  }
  client.Write(std::string(kSseDone));
}

}  // namespace pdspark::router
