#include "router/request_handler.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "router/async_rpc.h"
#include "router/stop_matcher.h"

namespace pdspark::router {
namespace {

using Steady = std::chrono::steady_clock;

double SecondsSince(Steady::time_point t) {
  return std::chrono::duration<double>(Steady::now() - t).count();
}

ApiError TooLong(const std::string& param, uint32_t max_model_len, uint32_t prompt,
                 uint32_t completion) {
  return ApiError{
      400,
      absl::StrCat("This model's maximum context length is ", max_model_len,
                   " tokens. However, you requested ", static_cast<uint64_t>(prompt) + completion,
                   " tokens (", prompt, " in the prompt, ", completion,
                   " for the completion). Please reduce the length of the prompt "
                   "or completion."),
      "invalid_request_error", param, "context_length_exceeded"};
}

ApiFinishReason FromProto(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_STOP:
      return ApiFinishReason::kStop;
    case v1::FINISH_REASON_LENGTH:
      return ApiFinishReason::kLength;
    case v1::FINISH_REASON_ABORT:
      return ApiFinishReason::kAbort;
    case v1::FINISH_REASON_ERROR:
      return ApiFinishReason::kError;
    default:
      return ApiFinishReason::kNone;
  }
}

v1::SamplingParams ToProto(const SamplingOptions& s, uint32_t max_tokens) {
  v1::SamplingParams p;
  p.set_temperature(static_cast<float>(s.temperature));
  p.set_top_p(static_cast<float>(s.top_p));
  p.set_top_k(s.top_k);
  p.set_min_p(static_cast<float>(s.min_p));
  p.set_max_tokens(max_tokens);
  p.set_min_tokens(s.min_tokens);
  for (uint32_t id : s.stop_token_ids) p.add_stop_token_ids(id);
  for (const std::string& stop : s.stop) p.add_stop(stop);
  if (s.seed) p.set_seed(*s.seed);
  p.set_ignore_eos(s.ignore_eos);
  if (s.logprobs) p.set_logprobs(*s.logprobs);
  if (s.prompt_logprobs) p.set_prompt_logprobs(*s.prompt_logprobs);
  p.set_presence_penalty(static_cast<float>(s.presence_penalty));
  p.set_frequency_penalty(static_cast<float>(s.frequency_penalty));
  if (s.repetition_penalty != 1.0)
    p.set_repetition_penalty(static_cast<float>(s.repetition_penalty));
  for (const auto& [id, bias] : s.logit_bias)
    (*p.mutable_logit_bias())[id] = static_cast<float>(bias);
  for (const auto& word : s.bad_words_ids)
    p.add_bad_words()->mutable_ids()->Add(word.begin(), word.end());
  p.set_json_schema(s.structured.json_schema);
  p.set_json_object(s.structured.json_object);
  for (const std::string& choice : s.structured.choice) p.add_choice(choice);
  p.set_regex(s.structured.regex);
  return p;
}

// The `status` label of pdspark_requests_total.
std::string_view OutcomeStatus(const GenerateOutcome& outcome) {
  if (outcome.finish == ApiFinishReason::kAbort) return "cancelled";
  if (outcome.error && outcome.error->http_status == 504) return "timeout";
  if (outcome.error || outcome.finish == ApiFinishReason::kError) return "error";
  return "ok";
}

// glibc keeps what a burst freed in its per-thread arenas; give it back once the router is
// idle, so its RSS follows what it holds rather than its busiest moment.
void ReturnFreeMemory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

int64_t UnixMicros(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

}  // namespace

// A live request, as cancellation and the watchdog see it. TryCancel is never called under
// `mu`: on gRPC's callback API it may run the call's reactions (and so the request's coroutine)
// on the calling thread, which would take `mu` again. The call's context is shared for that:
// it outlives a call that ends while it is being cancelled.
struct RequestHandler::Live {
  std::mutex mu;
  StreamObserver* observer = nullptr;  // set while Run streams
  bool cancelled = false;              // Abort or client gone
  // The worker call in progress, watched for stalls (docs/reliability.md).
  std::shared_ptr<grpc::ClientContext> downstream;
  bool cancellable = true;  // false: Cancel() lets the call finish (a Reserve, released after)
  std::string worker_id;
  Steady::time_point progress_at;              // the call's last message, or its start
  std::chrono::milliseconds stall_timeout{0};  // 0: only the worker's heartbeats are watched
  std::string stalled;                         // why the watchdog cancelled the call

  void Cancel() {
    std::shared_ptr<grpc::ClientContext> call;
    {
      std::lock_guard<std::mutex> lock(mu);
      cancelled = true;
      if (cancellable) call = downstream;
    }
    if (call != nullptr) call->TryCancel();
  }
  bool IsCancelled() {
    std::lock_guard<std::mutex> lock(mu);
    return cancelled;
  }
  // Starts watching a call to `worker`; false when the request is already cancelled.
  bool Watch(std::shared_ptr<grpc::ClientContext> ctx, const std::string& worker,
             std::chrono::milliseconds stall, bool cancel_on_abort = true) {
    std::lock_guard<std::mutex> lock(mu);
    if (cancelled) return false;
    downstream = std::move(ctx);
    cancellable = cancel_on_abort;
    worker_id = worker;
    progress_at = Steady::now();
    stall_timeout = stall;
    stalled.clear();
    return true;
  }
  void Progress() {
    std::lock_guard<std::mutex> lock(mu);
    progress_at = Steady::now();
  }
  // Stops watching; returns why the watchdog cancelled the call (empty when it did not).
  std::string Unwatch() {
    std::lock_guard<std::mutex> lock(mu);
    downstream.reset();
    worker_id.clear();
    return std::exchange(stalled, {});
  }
  // The watchdog: cancels the call when it made no progress for its stall timeout, or for
  // `silence` while its worker has not heartbeated for as long (stopped, partitioned, dead
  // without a connection reset). A busy worker that misses heartbeats but still streams is
  // left alone.
  void CheckStall(Steady::time_point now, const std::set<std::string>& silent_workers,
                  std::chrono::milliseconds silence) {
    std::shared_ptr<grpc::ClientContext> call;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (cancelled || downstream == nullptr || !stalled.empty()) return;
      if (stall_timeout.count() > 0 && now - progress_at > stall_timeout) {
        stalled = absl::StrCat("no progress for ", stall_timeout.count(), " ms");
      } else if (silent_workers.contains(worker_id) && now - progress_at > silence) {
        stalled = absl::StrCat("the worker sent no heartbeat and no progress for ", silence.count(),
                               " ms");
      } else {
        return;
      }
      call = downstream;
    }
    call->TryCancel();
  }
};

namespace {

// Resumes once the client can take more (StreamObserver::WhenWritable).
struct ClientWritable {
  StreamObserver& observer;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> waiter) {
    observer.WhenWritable([waiter] { waiter.resume(); });
  }
  void await_resume() const noexcept {}
};

}  // namespace

// Output state carried across attempts of one request.
struct RequestHandler::Attempt {
  std::unique_ptr<StreamDetokenizer> detokenizer;
  std::unique_ptr<StopMatcher> stops;
  uint32_t generated = 0;
  uint32_t attempts = 0;      // decode calls made, for RequestContext.attempt
  std::vector<uint32_t> ids;  // every token delivered so far
  RequestLifecycle life{{}};  // docs/reliability.md
  bool first_sent = false;
  double ttft_s = 0;
  Steady::time_point last_chunk;

  ApiError DeadlineError() const {
    return ApiError{504,
                    absl::StrCat("the request did not finish before its deadline (it was ",
                                 std::string(RequestStateName(life.state())), ")"),
                    "timeout", "", "deadline_exceeded"};
  }
};

AdmittedRequest::~AdmittedRequest() {
  if (on_release_) on_release_();
}

RequestHandler::RequestHandler(Options options, Scheduler* scheduler,
                               AdmissionController* admission, const TextCodec* codec,
                               WorkerChannels* channels, RouterMetrics* metrics)
    : options_(options),
      scheduler_(scheduler),
      admission_(admission),
      codec_(codec),
      channels_(channels),
      metrics_(metrics),
      poller_([this] { PollCancellations(); }) {}

RequestHandler::~RequestHandler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  poller_.join();
}

std::variant<std::unique_ptr<AdmittedRequest>, ApiError> RequestHandler::Admit(
    GenerateInput input) {
  if (draining_.load()) {
    metrics_->RequestFinished("rejected", "");
    return ApiError{503, "the router is shutting down", "service_unavailable", "", "shutting_down"};
  }
  auto ticket = admission_->TryAdmit();
  if (ticket == nullptr) {
    metrics_->Rejected("queue_full");
    metrics_->RequestFinished("rejected", "");
    return ApiError{429,
                    absl::StrCat("the router is at its limit of ", admission_->max_in_flight(),
                                 " requests in flight; retry later"),
                    "rate_limit_error", "", "rate_limit_exceeded"};
  }
  const uint32_t prompt = static_cast<uint32_t>(input.prompt_ids.size());
  uint32_t max_len = options_.max_model_len;
  auto reject_too_long = [&](ApiError e) {
    metrics_->Rejected("too_long");
    metrics_->RequestFinished("invalid", "");
    return e;
  };
  if (prompt == 0) {
    metrics_->Rejected("invalid");
    metrics_->RequestFinished("invalid", "");
    return ApiError{400, "the prompt is empty", "invalid_request_error", input.prompt_param,
                    "invalid_value"};
  }
  if (prompt >= max_len) return reject_too_long(TooLong(input.prompt_param, max_len, prompt, 1));
  const uint32_t room = max_len - prompt;
  uint32_t max_tokens = input.sampling.max_tokens.value_or(
      input.default_max_tokens_to_context ? room : std::min<uint32_t>(16, room));
  if (max_tokens > room) {
    return reject_too_long(TooLong("max_tokens", max_len, prompt, max_tokens));
  }

  auto admitted = std::unique_ptr<AdmittedRequest>(new AdmittedRequest());
  admitted->request_id_ = input.request_id.empty() ? RandomId("req-") : input.request_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!live_.emplace(admitted->request_id_, std::make_shared<Live>()).second) {
      metrics_->Rejected("invalid");
      metrics_->RequestFinished("invalid", "");
      return ApiError{400, absl::StrCat("request_id '", admitted->request_id_, "' is in use"),
                      "invalid_request_error", "request_id", "duplicate_request_id"};
    }
  }
  admitted->on_release_ = [this, id = admitted->request_id_] {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(id);
  };

  const std::string policy(SchedulingPolicyName(scheduler_->decode_policy()));
  StatusOr<Assignment> assignment = scheduler_->Pick(input.prompt_ids);
  if (!assignment.ok()) {
    metrics_->SchedulingDecision(policy, "decode", "no_worker");
    metrics_->Rejected("no_worker");
    metrics_->RequestFinished("rejected", "");
    return ApiError{503, "no healthy decode worker is available", "service_unavailable", "",
                    "no_healthy_worker"};
  }
  metrics_->SchedulingDecision(policy, "decode", "chosen");
  // A worker may serve a shorter context than the router's default.
  const uint32_t worker_len = assignment->decode.max_model_len;
  if (worker_len != 0 && prompt + max_tokens > worker_len) {
    return reject_too_long(TooLong(input.sampling.max_tokens ? "max_tokens" : input.prompt_param,
                                   worker_len, prompt, max_tokens));
  }

  const auto timeout = input.timeout.count() > 0 ? input.timeout : options_.default_timeout;
  admitted->deadline_ = std::chrono::system_clock::now() + timeout;
  admitted->max_tokens_ = max_tokens;
  admitted->assignment_ = std::move(*assignment);
  admitted->ticket_ = std::move(ticket);
  admitted->input_ = std::move(input);
  metrics_->in_flight().Increment();
  auto release_id = std::move(admitted->on_release_);
  admitted->on_release_ = [this, release_id = std::move(release_id)] {
    metrics_->in_flight().Decrement();
    release_id();
  };
  return admitted;
}

Task<GenerateOutcome> RequestHandler::Run(AdmittedRequest& request, StreamObserver& observer) {
  std::shared_ptr<Live> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    live = live_.at(request.request_id_);
  }
  {
    std::lock_guard<std::mutex> lock(live->mu);
    live->observer = &observer;
  }
  metrics_->queue_time().Observe(SecondsSince(request.input_.arrival));
  metrics_->prompt_tokens().Increment(request.prompt_tokens());

  Attempt state;
  state.life = RequestLifecycle(request.deadline_);
  state.detokenizer = codec_->NewDetokenizer(request.input_.sampling.skip_special_tokens);
  state.stops = std::make_unique<StopMatcher>(request.input_.sampling.stop,
                                              request.input_.sampling.include_stop_str_in_output);
  GenerateOutcome outcome;
  outcome.usage.prompt_tokens = request.prompt_tokens();
  WorkerSnapshot worker = request.assignment_.decode;
  std::string reservation;
  const bool disaggregated = request.assignment_.prefill.has_value() &&
                             request.prompt_tokens() >= options_.disagg_min_prompt_tokens;
  bool ended = false;
  if (disaggregated) {
    ended = co_await PrefillStage(request, *live, observer, state, outcome, &worker, &reservation);
  }
  if (!ended) {
    co_await DecodeStage(request, *live, observer, state, outcome, &worker, std::move(reservation));
  }
  state.life.Enter(outcome.finish == ApiFinishReason::kAbort ? RequestState::kCancelled
                   : outcome.error || outcome.finish == ApiFinishReason::kError
                       ? RequestState::kFailed
                       : RequestState::kDone);
  outcome.decode_worker = worker.worker_id;

  // The text held back for a possible stop string (or a partial character) goes out at the end.
  if (outcome.finish == ApiFinishReason::kStop || outcome.finish == ApiFinishReason::kLength) {
    TokenChunk tail;
    if (!state.stops->stopped()) {
      tail.text = state.stops->Push(state.detokenizer->Flush());
      if (!state.stops->stopped()) tail.text += state.stops->Flush();
    }
    if (!tail.text.empty()) observer.OnChunk(tail);
  }
  {
    std::lock_guard<std::mutex> lock(live->mu);
    live->observer = nullptr;
  }
  outcome.usage.completion_tokens = state.generated;
  metrics_->generation_tokens().Increment(state.generated);
  const double e2e = SecondsSince(request.input_.arrival);
  metrics_->e2e().Observe(e2e);
  if (state.generated > 1) metrics_->tpot().Observe((e2e - state.ttft_s) / (state.generated - 1));
  metrics_->RequestFinished(OutcomeStatus(outcome), FinishReasonName(outcome.finish));
  co_return outcome;
}

Task<bool> RequestHandler::PrefillStage(AdmittedRequest& request, Live& live,
                                        StreamObserver& observer, Attempt& state,
                                        GenerateOutcome& outcome, WorkerSnapshot* decode,
                                        std::string* reservation) {
  // Bounded attempts on distinct prefill workers; a failed or stalled attempt released its
  // reservation first, so nothing is held on the decode side between attempts. When they are
  // used up the decode worker prefills itself.
  WorkerSnapshot prefill = *request.assignment_.prefill;
  std::vector<std::string> failed;
  for (uint32_t attempt = 1;; ++attempt) {
    const PrefillResult result =
        co_await RunPrefill(request, prefill, *decode, live, observer, state, outcome, reservation);
    if (result == PrefillResult::kDone) co_return true;
    if (result != PrefillResult::kRetry) co_return false;  // kReady, kFallback
    metrics_->Retried("prefill");
    failed.push_back(prefill.worker_id);
    if (attempt >= options_.max_attempts) co_return false;
    std::optional<WorkerSnapshot> next =
        scheduler_->PickReplacement(v1::WORKER_ROLE_PREFILL, request.input_.prompt_ids, failed);
    if (!next) co_return false;
    // The transfer may have failed on the decode side: keep that worker only while healthy.
    std::optional<WorkerSnapshot> current = scheduler_->registry().Find(decode->worker_id);
    if (!current || current->state == WorkerState::kUnhealthy) {
      std::optional<WorkerSnapshot> other = scheduler_->PickReplacement(
          v1::WORKER_ROLE_DECODE, request.input_.prompt_ids, {decode->worker_id});
      if (other) *decode = std::move(*other);
    }
    LOG_WARN("prefill retried request={} failed_worker={} new_worker={} decode_worker={}",
             request.request_id_, prefill.worker_id, next->worker_id, decode->worker_id);
    prefill = std::move(*next);
  }
}

Task<void> RequestHandler::DecodeStage(AdmittedRequest& request, Live& live,
                                       StreamObserver& observer, Attempt& state,
                                       GenerateOutcome& outcome, WorkerSnapshot* worker,
                                       std::string reservation) {
  // A worker that fails before any token reached the client is replaced by a plain retry; one
  // that fails mid-stream by a migration: the new worker prefills prompt + the tokens the
  // client has seen (replaying their sampler draws, so a seeded stream stays the same) and
  // continues after them. At most max_attempts distinct decode workers.
  std::vector<std::string> failed;
  while (true) {
    if (state.life.Expired()) {
      SendRelease(*worker, reservation, /*transfer_completed=*/true);
      outcome.finish = ApiFinishReason::kError;
      outcome.error = state.DeadlineError();
      co_return;
    }
    const bool ended =
        co_await RunAttempt(request, *worker, reservation, live, observer, state, outcome);
    // Unless the request finished, free the lease: a call cancelled before its message was
    // sent never reaches the worker, whose Take would have freed it (a no-op if taken).
    if (outcome.finish != ApiFinishReason::kStop && outcome.finish != ApiFinishReason::kLength) {
      SendRelease(*worker, reservation, /*transfer_completed=*/true);
    }
    if (ended) co_return;
    reservation.clear();
    failed.push_back(worker->worker_id);
    std::optional<WorkerSnapshot> other;
    if (failed.size() < options_.max_attempts && !live.IsCancelled()) {
      other =
          scheduler_->PickReplacement(v1::WORKER_ROLE_DECODE, request.input_.prompt_ids, failed);
    }
    if (!other) {
      LOG_WARN("request failed request={} decode_workers_tried={} error={}", request.request_id_,
               failed.size(), outcome.error ? outcome.error->message : "");
      outcome.finish = ApiFinishReason::kError;  // outcome.error: the last worker's failure
      if (failed.size() > 1 && outcome.error) {
        absl::StrAppend(&outcome.error->message, " (after ", failed.size(), " decode workers)");
      }
      co_return;
    }
    if (state.generated > 0) {
      LOG_WARN("request migrated request={} failed_worker={} new_worker={} replayed_tokens={}",
               request.request_id_, worker->worker_id, other->worker_id, state.generated);
      metrics_->Migrated();
    } else {
      LOG_WARN("request retried request={} failed_worker={} new_worker={}", request.request_id_,
               worker->worker_id, other->worker_id);
      metrics_->Retried("decode");
    }
    state.life.Enter(RequestState::kQueued);
    *worker = std::move(*other);
    outcome.error.reset();
    outcome.finish = ApiFinishReason::kNone;
  }
}

Task<bool> RequestHandler::RunAttempt(AdmittedRequest& request, const WorkerSnapshot& worker,
                                      const std::string& reservation, Live& live,
                                      StreamObserver& observer, Attempt& state,
                                      GenerateOutcome& outcome) {
  StreamReader<v1::WorkerGenerateResponse> reader;
  grpc::ClientContext& ctx = *reader.context();
  ctx.set_deadline(request.deadline_);
  v1::WorkerGenerateRequest call;
  call.mutable_context()->set_request_id(request.request_id_);
  call.mutable_context()->set_deadline_unix_us(UnixMicros(request.deadline_));
  call.mutable_context()->set_attempt(state.attempts++);
  call.mutable_prompt_token_ids()->Assign(request.input_.prompt_ids.begin(),
                                          request.input_.prompt_ids.end());
  *call.mutable_sampling() = ToProto(request.input_.sampling, request.max_tokens_);
  // The prompt logprobs went out with the first token.
  if (!state.ids.empty()) call.mutable_sampling()->clear_prompt_logprobs();
  // Continue from the state the prefill worker pushed (the first token already went out), or
  // after a migration from the tokens the client has seen, which this worker prefills again.
  if (!reservation.empty()) call.set_reservation_id(reservation);
  call.mutable_generated_token_ids()->Assign(state.ids.begin(), state.ids.end());
  state.life.Enter(RequestState::kDecoding);
  if (!live.Watch(reader.context(), worker.worker_id, options_.decode_stall_timeout)) {
    outcome.finish = ApiFinishReason::kAbort;
    co_return true;
  }
  auto stub = v1::DecodeWorker::NewStub(channels_->Get(worker.address));
  stub->async()->Generate(&ctx, &call, &reader);
  reader.Start();
  // The router ended the request (stop string, its own max_tokens count) while the worker
  // would go on: cancel the stream and tell the worker to free the cache.
  bool cancel_downstream = false;
  std::string worker_error;   // the worker reported a failure in the stream
  bool stream_ended = false;  // the worker ended the stream (its status tells how)
  v1::WorkerGenerateResponse response;
  while (outcome.finish == ApiFinishReason::kNone) {
    if (!co_await reader.Read(&response)) {
      stream_ended = true;
      break;
    }
    live.Progress();
    if (!response.error().empty()) {
      worker_error = response.error();
      break;
    }
    bool stopped = false;
    const bool client_stayed =
        co_await Deliver(response.token_ids().data(), response.token_ids_size(),
                         {&response.logprobs(), &response.prompt_logprobs()}, request, state,
                         observer, outcome, &stopped);
    if (!client_stayed) {
      live.Cancel();
      break;
    }
    if (response.has_spec()) outcome.spec = response.spec();
    if (response.cached_prompt_tokens() > 0) {
      outcome.usage.cached_tokens = response.cached_prompt_tokens();
    }
    const ApiFinishReason worker_finish = FromProto(response.finish_reason());
    if (outcome.finish != ApiFinishReason::kNone && worker_finish == ApiFinishReason::kNone) {
      cancel_downstream = true;
    }
    if (outcome.finish == ApiFinishReason::kNone) outcome.finish = worker_finish;
  }
  // Ending early: cancel so Finish() does not wait for the worker to end the stream. (Not
  // after the stream ended: the cancellation would replace the worker's status.)
  if (!stream_ended && (outcome.finish == ApiFinishReason::kNone || cancel_downstream)) {
    ctx.TryCancel();
  }
  const std::string stalled = live.Unwatch();
  const grpc::Status status = co_await reader.Finish();
  if (live.IsCancelled()) {
    outcome.finish = ApiFinishReason::kAbort;
    cancel_downstream = true;
  }
  if (cancel_downstream) SendCancel(worker, request.request_id_);
  if (outcome.finish != ApiFinishReason::kNone) co_return true;

  // Past the deadline the worker may end the call first (CANCELLED, or an error in the
  // stream) or the client timer may (DEADLINE_EXCEEDED); either way it is a timeout.
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
      ((!status.ok() || !worker_error.empty()) && state.life.Expired())) {
    outcome.finish = ApiFinishReason::kError;
    outcome.error = state.DeadlineError();
    SendCancel(worker, request.request_id_);
    co_return true;
  }
  if (status.ok() && worker_error.empty()) {
    // A stream that ends cleanly without a finish reason: treat as a stop.
    outcome.finish = ApiFinishReason::kStop;
    co_return true;
  }
  if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
      status.error_code() == grpc::StatusCode::OUT_OF_RANGE) {
    // The request itself is wrong (a token id outside the vocabulary): no worker would take it.
    outcome.finish = ApiFinishReason::kError;
    outcome.error = ApiError{
        400, absl::StrCat("the decode worker refused the request: ", status.error_message()),
        "invalid_request_error", "", "invalid_value"};
    co_return true;
  }
  std::string why = !worker_error.empty() ? worker_error
                    : !stalled.empty()    ? stalled
                                          : status.error_message();
  // A stalled worker that comes back must still free the request.
  if (!stalled.empty() || !worker_error.empty()) SendCancel(worker, request.request_id_);
  LOG_WARN("decode call failed request={} worker={} code={} error={}", request.request_id_,
           worker.worker_id, static_cast<int>(status.error_code()), why);
  // Retryable (nothing reached the client) or migratable (the rest continues elsewhere); the
  // error is what the client gets when no other worker can take it.
  outcome.error = ApiError{502, absl::StrCat("decode worker ", worker.worker_id, " failed: ", why),
                           "server_error", "", "worker_failed"};
  co_return false;
}

Task<bool> RequestHandler::Deliver(const uint32_t* ids, size_t n, const WorkerLogprobs& logprobs,
                                   AdmittedRequest& request, Attempt& state,
                                   StreamObserver& observer, GenerateOutcome& outcome,
                                   bool* stopped_here) {
  TokenChunk chunk;
  if (logprobs.prompt != nullptr && !state.first_sent) {
    chunk.prompt_logprobs.assign(logprobs.prompt->begin(), logprobs.prompt->end());
  }
  const bool with_logprobs = logprobs.tokens != nullptr && logprobs.tokens->size() == n;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t id = ids[i];
    chunk.token_ids.push_back(id);
    if (with_logprobs) chunk.logprobs.push_back((*logprobs.tokens)[i]);
    state.ids.push_back(id);
    ++state.generated;
    chunk.text += state.stops->Push(state.detokenizer->Push(id));
    if (state.stops->stopped()) {
      outcome.finish = ApiFinishReason::kStop;
      *stopped_here = true;
      break;
    }
    if (state.generated >= request.max_tokens_) {
      outcome.finish = ApiFinishReason::kLength;
      break;
    }
  }
  if (chunk.token_ids.empty()) co_return true;
  const auto now = Steady::now();
  if (!state.first_sent) {
    state.ttft_s = SecondsSince(request.input_.arrival);
    metrics_->ttft().Observe(state.ttft_s);
    state.first_sent = true;
  } else {
    metrics_->itl().Observe(std::chrono::duration<double>(now - state.last_chunk).count() /
                            chunk.token_ids.size());
  }
  state.last_chunk = now;
  if (!observer.OnChunk(chunk)) co_return false;
  ClientWritable writable{observer};  // named: see common/base/task.h on GCC 12
  co_await writable;
  co_return !observer.ClientGone();
}

Task<RequestHandler::PrefillResult> RequestHandler::RunPrefill(
    AdmittedRequest& request, const WorkerSnapshot& prefill, const WorkerSnapshot& decode,
    Live& live, StreamObserver& observer, Attempt& state, GenerateOutcome& outcome,
    std::string* reservation) {
  const std::string policy(SchedulingPolicyName(scheduler_->prefill_policy()));
  metrics_->SchedulingDecision(policy, "prefill", "chosen");
  v1::RequestContext context;
  context.set_request_id(request.request_id_);
  context.set_deadline_unix_us(UnixMicros(request.deadline_));
  if (state.life.Expired()) {
    outcome.finish = ApiFinishReason::kError;
    outcome.error = state.DeadlineError();
    co_return PrefillResult::kDone;
  }

  // 1. Cache on the decode worker, leased until the prefill side delivers.
  v1::ReserveRequest reserve;
  *reserve.mutable_context() = context;
  reserve.set_prompt_tokens(request.prompt_tokens());
  // A decode worker holding a prefix of the prompt receives only the rest.
  reserve.mutable_prompt_token_ids()->Assign(request.input_.prompt_ids.begin(),
                                             request.input_.prompt_ids.end());
  reserve.set_max_tokens(request.max_tokens_);
  reserve.set_lease_ms(static_cast<uint32_t>(options_.reservation_lease.count()));
  v1::ReserveResponse reserved;
  // A decode worker whose KV pool is fully leased refuses with RESOURCE_EXHAUSTED: wait for a
  // lease (back-off up to reserve_wait) rather than lose disaggregation at once.
  const auto give_up_waiting = Steady::now() + options_.reserve_wait;
  auto backoff = std::chrono::milliseconds(20);
  while (true) {
    auto ctx = std::make_shared<grpc::ClientContext>();
    ctx->set_deadline(
        std::min(request.deadline_, std::chrono::system_clock::now() + options_.reservation_lease));
    // A client that leaves now does not cancel the call: cancelled, the worker could still
    // make the reservation and the router would not know its id to release it.
    if (!live.Watch(ctx, decode.worker_id, std::chrono::milliseconds(0),
                    /*cancel_on_abort=*/false)) {
      outcome.finish = ApiFinishReason::kAbort;
      co_return PrefillResult::kDone;
    }
    auto stub = v1::DecodeWorker::NewStub(channels_->Get(decode.address));
    grpc::Status status = co_await UnaryCall([&](auto done) {
      stub->async()->Reserve(ctx.get(), &reserve, &reserved, std::move(done));
    });
    const std::string stalled = live.Unwatch();
    if (status.ok()) break;
    const bool pool_full =
        stalled.empty() && status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    if (pool_full && Steady::now() + backoff < give_up_waiting) {
      if (state.life.Expired()) {
        outcome.finish = ApiFinishReason::kError;
        outcome.error = state.DeadlineError();
        co_return PrefillResult::kDone;
      }
      co_await Sleep(backoff);
      backoff = std::min(2 * backoff, std::chrono::milliseconds(500));
      continue;
    }
    LOG_WARN("reserve failed, prefilling on the decode worker request={} worker={} error={}",
             request.request_id_, decode.worker_id,
             stalled.empty() ? status.error_message() : stalled);
    metrics_->SchedulingDecision(policy, "prefill", "reserve_refused");
    co_return PrefillResult::kFallback;
  }
  *reservation = reserved.reservation_id();
  state.life.Enter(RequestState::kReserved);

  // 2. Prefill: the worker pushes the state into the reservation and samples the first token.
  v1::PrefillRequest call;
  *call.mutable_context() = context;
  call.mutable_prompt_token_ids()->Assign(request.input_.prompt_ids.begin(),
                                          request.input_.prompt_ids.end());
  *call.mutable_sampling() = ToProto(request.input_.sampling, request.max_tokens_);
  call.set_decode_address(decode.address);
  call.set_reservation_id(*reservation);
  call.set_transfer_descriptor(reserved.transfer_descriptor());
  // The stall timer: a prefill worker that is stopped, partitioned or wedged mid-transfer
  // never ends the stream by itself (the watchdog also ends it once it misses heartbeats).
  StreamReader<v1::PrefillProgress> reader;
  grpc::ClientContext& ctx = *reader.context();
  ctx.set_deadline(std::min(request.deadline_,
                            std::chrono::system_clock::now() + options_.prefill_attempt_timeout));
  state.life.Enter(RequestState::kPrefilling);
  if (!live.Watch(reader.context(), prefill.worker_id, std::chrono::milliseconds(0))) {
    ctx.TryCancel();
  }
  auto stub = v1::PrefillWorker::NewStub(channels_->Get(prefill.address));
  stub->async()->Prefill(&ctx, &call, &reader);
  reader.Start();
  v1::PrefillProgress progress;
  bool completed = false;
  std::string failure;
  while (co_await reader.Read(&progress)) {
    if (progress.stage() == v1::PrefillProgress::STAGE_COMPLETED) {
      completed = true;
      break;
    }
    if (progress.stage() == v1::PrefillProgress::STAGE_FAILED) {
      // The worker ends the call right after, with the status that says why.
      failure = progress.error().empty() ? "STAGE_FAILED" : progress.error();
    }
    if (progress.stage() == v1::PrefillProgress::STAGE_LAYER_SENT &&
        state.life.state() == RequestState::kPrefilling) {
      state.life.Enter(RequestState::kTransferring);
    }
  }
  const std::string stalled = live.Unwatch();
  grpc::Status status = co_await reader.Finish();

  auto give_up = [&] {
    SendPrefillCancel(prefill, request.request_id_);
    SendRelease(decode, *reservation, /*transfer_completed=*/false);
    reservation->clear();
  };
  if (live.IsCancelled()) {
    give_up();
    outcome.finish = ApiFinishReason::kAbort;
    co_return PrefillResult::kDone;
  }
  if (!completed) {
    give_up();
    if (state.life.Expired()) {
      outcome.finish = ApiFinishReason::kError;
      outcome.error = state.DeadlineError();
      co_return PrefillResult::kDone;
    }
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      // The prompt itself is wrong (a token id outside the vocabulary): no retry helps.
      outcome.finish = ApiFinishReason::kError;
      outcome.error = ApiError{
          400, absl::StrCat("the prefill worker refused the request: ", status.error_message()),
          "invalid_request_error", "", "invalid_value"};
      co_return PrefillResult::kDone;
    }
    if (!stalled.empty()) {
      failure = stalled;
    } else if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      failure = absl::StrCat("no answer within ", options_.prefill_attempt_timeout.count(),
                             " ms (--prefill-attempt-timeout-ms)");
    } else if (failure.empty()) {
      failure = status.ok() ? "stream ended before STAGE_COMPLETED" : status.error_message();
    }
    LOG_WARN("prefill attempt failed request={} worker={} stage={} error={}", request.request_id_,
             prefill.worker_id, RequestStateName(state.life.state()), failure);
    state.life.Enter(RequestState::kQueued);
    co_return PrefillResult::kRetry;
  }
  // Completed: the state is on the decode side.
  if (state.life.state() == RequestState::kPrefilling) {
    state.life.Enter(RequestState::kTransferring);
  }

  // 3. The first token goes to the client now; decode continues after it.
  outcome.usage.cached_tokens = progress.cached_prompt_tokens();
  const uint32_t first = progress.first_token_id();
  google::protobuf::RepeatedPtrField<v1::TokenLogprob> first_logprob;
  if (progress.has_first_token_logprob()) *first_logprob.Add() = progress.first_token_logprob();
  bool stopped = false;
  const bool client_stayed =
      co_await Deliver(&first, 1, {&first_logprob, &progress.prompt_logprobs()}, request, state,
                       observer, outcome, &stopped);
  if (!client_stayed) {
    live.Cancel();
    outcome.finish = ApiFinishReason::kAbort;
  }
  if (outcome.finish != ApiFinishReason::kNone) {
    SendRelease(decode, *reservation, /*transfer_completed=*/true);
    reservation->clear();
    co_return PrefillResult::kDone;
  }
  co_return PrefillResult::kReady;
}

// Fire-and-forget unary calls (cancel, release): the request path does not wait for them. One
// that fails is logged as `what`: a release lost leaves the decode worker's pages to the lease's
// expiry and a quarantine after it, 40 s by default, and its log alone does not say why.
template <typename Service, typename Request, typename Response, typename Start>
void FireAndForget(const std::shared_ptr<grpc::Channel>& channel, Request request, Start start,
                   std::string what) {
  struct Call {
    grpc::ClientContext ctx;
    Request request;
    Response response;
    std::unique_ptr<typename Service::Stub> stub;
  };
  auto* call = new Call;
  call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  call->request = std::move(request);
  call->stub = Service::NewStub(channel);
  start(call->stub->async(), &call->ctx, &call->request, &call->response,
        [call, what = std::move(what)](grpc::Status status) {
          if (!status.ok()) LOG_WARN("{} not delivered error={}", what, status.error_message());
          delete call;
        });
}

void RequestHandler::SendCancel(const WorkerSnapshot& worker, const std::string& request_id) {
  // The stream cancellation already tells the worker; this is the explicit message for workers
  // that track requests by id.
  v1::CancelRequest request;
  request.set_request_id(request_id);
  FireAndForget<v1::DecodeWorker, v1::CancelRequest, v1::CancelResponse>(
      channels_->Get(worker.address), std::move(request),
      [](auto* async, auto* ctx, auto* req, auto* resp, auto done) {
        async->Cancel(ctx, req, resp, std::move(done));
      },
      absl::StrCat("cancel request=", request_id, " worker=", worker.worker_id));
}

void RequestHandler::SendPrefillCancel(const WorkerSnapshot& worker,
                                       const std::string& request_id) {
  v1::CancelRequest request;
  request.set_request_id(request_id);
  FireAndForget<v1::PrefillWorker, v1::CancelRequest, v1::CancelResponse>(
      channels_->Get(worker.address), std::move(request),
      [](auto* async, auto* ctx, auto* req, auto* resp, auto done) {
        async->Cancel(ctx, req, resp, std::move(done));
      },
      absl::StrCat("cancel request=", request_id, " worker=", worker.worker_id));
}

void RequestHandler::SendRelease(const WorkerSnapshot& worker, const std::string& reservation,
                                 bool transfer_completed) {
  if (reservation.empty()) return;
  v1::ReleaseRequest request;
  request.set_reservation_id(reservation);
  request.set_transfer_completed(transfer_completed);
  FireAndForget<v1::DecodeWorker, v1::ReleaseRequest, v1::ReleaseResponse>(
      channels_->Get(worker.address), std::move(request),
      [](auto* async, auto* ctx, auto* req, auto* resp, auto done) {
        async->Release(ctx, req, resp, std::move(done));
      },
      absl::StrCat("release reservation=", reservation, " worker=", worker.worker_id));
}

bool RequestHandler::Abort(const std::string& request_id) {
  std::shared_ptr<Live> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(request_id);
    if (it == live_.end()) return false;
    live = it->second;
  }
  LOG_INFO("request aborted request={}", request_id);
  live->Cancel();
  return true;
}

void RequestHandler::Drain(std::chrono::milliseconds grace) {
  draining_ = true;
  std::unique_lock<std::mutex> lock(mu_);
  if (WaitForNoLive(lock, Steady::now() + grace)) return;
  LOG_WARN("shutdown cancels requests in flight count={}", live_.size());
  std::vector<std::shared_ptr<Live>> cancel;
  for (auto& [id, live] : live_) cancel.push_back(live);
  lock.unlock();
  for (auto& live : cancel) live->Cancel();  // not under mu_: see Live
  lock.lock();
  // The cancelled requests end on gRPC and HTTP threads; let them answer their clients before
  // the servers go away.
  WaitForNoLive(lock, Steady::now() + std::chrono::seconds(5));
}

bool RequestHandler::WaitForNoLive(std::unique_lock<std::mutex>& lock, Steady::time_point until) {
  while (!live_.empty() && Steady::now() < until) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    lock.lock();
  }
  return live_.empty();
}

void RequestHandler::PollCancellations() {
  std::unique_lock<std::mutex> lock(mu_);
  bool busy = false;
  while (!stopping_) {
    stop_cv_.wait_for(lock, options_.cancel_poll);
    std::vector<std::shared_ptr<Live>> live;
    for (const auto& [id, l] : live_) live.push_back(l);
    lock.unlock();
    if (live.empty() && std::exchange(busy, false)) ReturnFreeMemory();
    busy = busy || !live.empty();
    const auto silence =
        scheduler_->registry().heartbeat_interval() * options_.give_up_missed_heartbeats;
    std::set<std::string> silent;
    if (!live.empty()) {
      for (std::string& id : scheduler_->registry().Silent(silence)) silent.insert(std::move(id));
    }
    const auto now = Steady::now();
    for (const auto& l : live) {
      bool gone = false;
      {
        std::lock_guard<std::mutex> guard(l->mu);
        gone = !l->cancelled && l->observer != nullptr && l->observer->ClientGone();
      }
      if (gone) {
        l->Cancel();
      } else {
        l->CheckStall(now, silent, silence);
      }
    }
    lock.lock();
  }
}

grpc::StatusCode GrpcCodeFor(const ApiError& error) {
  switch (error.http_status) {
    case 400:
    case 413:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 401:
      return grpc::StatusCode::UNAUTHENTICATED;
    case 404:
      return grpc::StatusCode::NOT_FOUND;
    case 429:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 502:
      return grpc::StatusCode::UNAVAILABLE;
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    case 504:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case 499:
      return grpc::StatusCode::CANCELLED;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

std::string RandomId(std::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrCat(std::string(prefix), absl::Hex(rng(), absl::kZeroPad16),
                      absl::Hex(rng() & 0xffffffffu, absl::kZeroPad8));
}

}  // namespace pdspark::router
