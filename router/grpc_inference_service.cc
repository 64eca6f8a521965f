#include "router/grpc_inference_service.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/security/api_key.h"
#include "router/openai_structured_output.h"
#include "router/sampling_tokens.h"

namespace pdspark::router {
namespace {

grpc::Status ToGrpc(const ApiError& e) { return grpc::Status(GrpcCodeFor(e), e.message); }

v1::FinishReason ToProto(ApiFinishReason r) {
  switch (r) {
    case ApiFinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case ApiFinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case ApiFinishReason::kAbort:
      return v1::FINISH_REASON_ABORT;
    case ApiFinishReason::kError:
      return v1::FINISH_REASON_ERROR;
    case ApiFinishReason::kNone:
      break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

// One Generate stream: runs the request and writes its chunks, one write in flight at a time.
// gRPC deletes it (OnDone) after Finish, which comes only once the request has ended.
class GenerateCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                           public StreamObserver {
 public:
  // Responses queued beyond this make the request wait for the client (WhenWritable).
  static constexpr size_t kMaxQueued = 8;

  // A call refused before it ran.
  explicit GenerateCall(const grpc::Status& refusal) { Finish(refusal); }

  GenerateCall(grpc::CallbackServerContext* context, RequestHandler* handler,
               std::unique_ptr<AdmittedRequest> request)
      : context_(context), request_(std::move(request)) {
    Spawn(handler->Run(*request_, *this),
          [this](GenerateOutcome outcome) { OnOutcome(std::move(outcome)); });
  }

  bool OnChunk(const TokenChunk& chunk) override {
    v1::GenerateResponse response;
    response.set_request_id(request_->request_id());
    response.mutable_token_ids()->Assign(chunk.token_ids.begin(), chunk.token_ids.end());
    response.set_text(chunk.text);
    response.mutable_logprobs()->Add(chunk.logprobs.begin(), chunk.logprobs.end());
    response.mutable_prompt_logprobs()->Add(chunk.prompt_logprobs.begin(),
                                            chunk.prompt_logprobs.end());
    return Queue(response);
  }
  bool ClientGone() const override { return gone_.load(); }
  void WhenWritable(std::function<void()> ready) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!gone_ && queue_.size() > kMaxQueued) {
        ready_ = std::move(ready);
        return;
      }
    }
    ready();
  }

 private:
  void OnOutcome(GenerateOutcome outcome) {
    const std::string request_id = request_->request_id();
    request_.reset();  // frees its admission slot now
    grpc::Status status = grpc::Status::OK;
    if (outcome.error) {
      status = grpc::Status(GrpcCodeFor(*outcome.error), outcome.error->message);
    } else if (outcome.finish == ApiFinishReason::kAbort && context_->IsCancelled()) {
      status = grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
    } else {
      v1::GenerateResponse last;
      last.set_request_id(request_id);
      last.set_finish_reason(ToProto(outcome.finish));
      last.mutable_usage()->set_prompt_tokens(outcome.usage.prompt_tokens);
      last.mutable_usage()->set_completion_tokens(outcome.usage.completion_tokens);
      last.mutable_usage()->set_cached_prompt_tokens(outcome.usage.cached_tokens);
      *last.mutable_spec() = outcome.spec;
      Queue(last);
    }
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      final_status_ = std::move(status);
      finish = ShouldFinishLocked();
    }
    if (finish) Finish(*final_status_);  // last: OnDone may delete this at once
  }

  // gRPC calls (StartWrite, Finish) are made outside mu_: they may run this reactor's
  // reactions on the calling thread.
  bool Queue(const v1::GenerateResponse& response) {
    grpc::ByteBuffer bytes;
    bool own = false;
    grpc::SerializationTraits<v1::GenerateResponse>::Serialize(response, &bytes, &own);
    const grpc::ByteBuffer* write = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (gone_) return false;
      queue_.push_back(std::move(bytes));
      if (!writing_) {
        writing_ = true;
        write = &queue_.front();
      }
    }
    if (write != nullptr) StartWrite(write);
    return true;
  }

  void OnWriteDone(bool ok) override {
    std::function<void()> ready;
    const grpc::ByteBuffer* next = nullptr;
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.pop_front();
      writing_ = false;
      if (!ok) {
        gone_ = true;
        queue_.clear();
      }
      if (!queue_.empty()) {
        writing_ = true;
        next = &queue_.front();
      }
      if (ready_ && (gone_ || queue_.size() <= kMaxQueued)) ready = std::exchange(ready_, {});
      finish = ShouldFinishLocked();
    }
    if (next != nullptr) StartWrite(next);
    if (ready) ready();
    if (finish) Finish(*final_status_);  // last: OnDone may delete this at once
  }

  void OnCancel() override {
    std::function<void()> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      gone_ = true;
      ready = std::exchange(ready_, {});
    }
    if (ready) ready();
  }

  void OnDone() override { delete this; }

  // Finish once the request has ended and every queued response is written.
  bool ShouldFinishLocked() {
    if (!final_status_ || writing_ || finished_) return false;
    finished_ = true;
    return true;
  }

  grpc::CallbackServerContext* context_ = nullptr;
  std::unique_ptr<AdmittedRequest> request_;
  std::mutex mu_;
  std::deque<grpc::ByteBuffer> queue_;  // front: the write in flight
  bool writing_ = false;
  std::atomic<bool> gone_{false};
  std::function<void()> ready_;
  std::optional<grpc::Status> final_status_;
  bool finished_ = false;
};

// A unary call answered at once.
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// Token ids travel as int32 downstream (the HTTP API refuses larger ones while parsing).
std::optional<ApiError> CheckTokenIds(const std::vector<uint32_t>& ids, const std::string& param) {
  for (uint32_t id : ids) {
    if (id > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
      return ApiError{400, absl::StrCat("token id ", id, " is out of range"),
                      "invalid_request_error", param, "invalid_value"};
    }
  }
  return std::nullopt;
}

}  // namespace

grpc::Status GrpcInferenceService::CheckAccess(const grpc::ServerContextBase& context,
                                               bool generate) const {
  if (!api_key_.empty()) {
    auto it = context.client_metadata().find("authorization");
    const std::string_view value = it == context.client_metadata().end()
                                       ? std::string_view()
                                       : std::string_view(it->second.data(), it->second.size());
    if (!security::AuthorizationMatches(value, api_key_)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          it == context.client_metadata().end()
                              ? "missing API key: send metadata 'authorization: Bearer <key>'"
                              : "incorrect API key");
    }
  }
  if (generate && limiter_ != nullptr &&
      limiter_->Acquire(RateLimiter::ClientKey(context.peer())) != RateLimiter::Verdict::kAllowed) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "rate limit reached; retry later");
  }
  return grpc::Status::OK;
}

std::variant<GenerateInput, ApiError> GrpcInferenceService::ToInput(
    const grpc::ServerContextBase& context, const v1::GenerateRequest& request) const {
  GenerateInput input;
  input.request_id = request.request_id();
  input.prompt_param = "input";
  if (!request.model().empty() && request.model() != model_name_) {
    return ApiError{404, absl::StrCat("model '", request.model(), "' is not served here"),
                    "not_found_error", "model", "model_not_found"};
  }
  if (request.has_token_ids()) {
    input.prompt_ids.assign(request.token_ids().ids().begin(), request.token_ids().ids().end());
    if (auto error = CheckTokenIds(input.prompt_ids, "token_ids")) return *error;
  } else {
    // Without this check an empty or missing input would become a prompt of BOS alone.
    if (request.text().empty()) {
      return ApiError{400, "the input is empty: set `text` or `token_ids`", "invalid_request_error",
                      "input", "invalid_value"};
    }
    StatusOr<std::vector<uint32_t>> ids = handler_->codec().Encode(request.text(), true);
    if (!ids.ok()) {
      return ApiError{400, std::string(ids.status().message()), "invalid_request_error", "text",
                      "invalid_value"};
    }
    input.prompt_ids = *std::move(ids);
    if (auto bos = handler_->codec().bos_token_id();
        bos && (input.prompt_ids.empty() || input.prompt_ids.front() != *bos)) {
      input.prompt_ids.insert(input.prompt_ids.begin(), *bos);
    }
  }
  const v1::SamplingParams& p = request.sampling();
  SamplingOptions& s = input.sampling;
  s.temperature = p.temperature();
  s.top_p = p.top_p() <= 0 ? 1.0 : p.top_p();
  s.top_k = p.top_k();
  s.min_p = p.min_p();
  if (p.temperature() < 0 || p.top_p() > 1 || p.min_p() < 0 || p.min_p() > 1 || p.top_k() < -1) {
    return ApiError{400, "sampling parameters out of range", "invalid_request_error", "sampling",
                    "invalid_value"};
  }
  if (p.max_tokens() > 0) s.max_tokens = p.max_tokens();
  s.min_tokens = p.min_tokens();
  s.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  if (auto error = CheckTokenIds(s.stop_token_ids, "sampling.stop_token_ids")) return *error;
  s.stop.assign(p.stop().begin(), p.stop().end());
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  if (p.has_repetition_penalty()) s.repetition_penalty = p.repetition_penalty();
  for (const auto& [id, bias] : p.logit_bias()) s.logit_bias.emplace_back(id, bias);
  for (const v1::TokenSequence& word : p.bad_words()) {
    s.bad_words_ids.emplace_back(word.ids().begin(), word.ids().end());
  }
  s.structured.json_schema = p.json_schema();
  s.structured.json_object = p.json_object();
  s.structured.choice.assign(p.choice().begin(), p.choice().end());
  s.structured.regex = p.regex();
  if (auto error = CheckStructuredOutput(s.structured, "sampling")) return *error;
  if (auto error = CheckSamplingLimits(s, ParseLimits{})) {
    error->param = "sampling." + error->param;
    return *error;
  }
  if (auto error = ResolveSamplingTokens(handler_->codec(), &s, "sampling.")) return *error;
  if (p.has_seed()) s.seed = p.seed();
  s.ignore_eos = p.ignore_eos();
  if ((p.has_logprobs() && p.logprobs() > kMaxLogprobs) ||
      (p.has_prompt_logprobs() && p.prompt_logprobs() > kMaxLogprobs)) {
    return ApiError{400,
                    absl::StrCat("logprobs and prompt_logprobs must be at most ", kMaxLogprobs),
                    "invalid_request_error", "sampling.logprobs", "invalid_value"};
  }
  if (p.has_logprobs()) s.logprobs = p.logprobs();
  if (p.has_prompt_logprobs()) s.prompt_logprobs = p.prompt_logprobs();
  s.skip_special_tokens = request.skip_special_tokens();
  // max_tokens 0 means "until EOS or the end of the context".
  input.default_max_tokens_to_context = true;
  // The tighter of the request's timeout and the client's own gRPC deadline.
  auto timeout = std::chrono::milliseconds(request.timeout_ms());
  const auto client_left = std::chrono::duration_cast<std::chrono::milliseconds>(
      context.deadline() - std::chrono::system_clock::now());
  if (client_left.count() > 0 && client_left < std::chrono::hours(24 * 365) &&
      (timeout.count() == 0 || client_left < timeout)) {
    timeout = client_left;
  }
  input.timeout = timeout;
  return input;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GrpcInferenceService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  if (grpc::Status access = CheckAccess(*context, true); !access.ok()) {
    return new GenerateCall(access);
  }
  v1::GenerateRequest request;
  grpc::ByteBuffer copy(*bytes);  // Deserialize consumes its buffer
  if (!grpc::SerializationTraits<v1::GenerateRequest>::Deserialize(&copy, &request).ok()) {
    return new GenerateCall(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        "the request is not a valid pdspark.v1.GenerateRequest (a string field that is not "
        "UTF-8, or malformed protobuf)"));
  }
  auto input = ToInput(*context, request);
  if (auto* e = std::get_if<ApiError>(&input)) return new GenerateCall(ToGrpc(*e));
  auto admitted = handler_->Admit(std::get<GenerateInput>(std::move(input)));
  if (auto* e = std::get_if<ApiError>(&admitted)) return new GenerateCall(ToGrpc(*e));
  return new GenerateCall(context, handler_,
                          std::get<std::unique_ptr<AdmittedRequest>>(std::move(admitted)));
}

grpc::ServerUnaryReactor* GrpcInferenceService::Abort(grpc::CallbackServerContext* context,
                                                      const v1::AbortRequest* request,
                                                      v1::AbortResponse* response) {
  if (grpc::Status access = CheckAccess(*context, false); !access.ok()) {
    return Answer(context, access);
  }
  response->set_found(handler_->Abort(request->request_id()));
  return Answer(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GrpcInferenceService::ListModels(grpc::CallbackServerContext* context,
                                                           const v1::ListModelsRequest*,
                                                           v1::ListModelsResponse* response) {
  if (grpc::Status access = CheckAccess(*context, false); !access.ok()) {
    return Answer(context, access);
  }
  v1::ModelInfo* model = response->add_models();
  model->set_id(model_name_);
  model->set_max_model_len(handler_->options().max_model_len);
  return Answer(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GrpcInferenceService::Health(grpc::CallbackServerContext* context,
                                                       const v1::HealthRequest*,
                                                       v1::HealthResponse* response) {
  const size_t decode = registry_->Healthy(v1::WORKER_ROLE_DECODE).size();
  response->set_decode_workers(static_cast<uint32_t>(decode));
  response->set_prefill_workers(
      static_cast<uint32_t>(registry_->Healthy(v1::WORKER_ROLE_PREFILL).size()));
  response->set_serving(decode > 0);
  return Answer(context, grpc::Status::OK);
}

}  // namespace pdspark::router
