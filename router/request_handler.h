// The router's request path, shared by the HTTP and gRPC front ends:
//   Admit: admission control, length limits, worker choice — every error a client can get
//          before the first response byte (so HTTP can still answer 400/429/503);
//   Run:   calls the decode worker's `DecodeWorker.Generate` stream, detokenizes, matches stop
//          strings and hands text deltas to the front end, until a finish reason.
// Cancellation: `Abort(request_id)`, a front end reporting its client gone, a stop string, or
// the deadline all cancel the downstream call (and send `DecodeWorker.Cancel`), so the worker
// frees the request's cache.
// Failures (docs/reliability.md): a prefill worker that fails or stalls is replaced by another
// one (or the decode worker prefills); a decode worker that fails, stalls or stops heartbeating
// is replaced by another one, which continues after the tokens the client has seen. Both are
// bounded by `max_attempts`, and every stage checks the request's one absolute deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "common/base/task.h"
#include "pdspark/v1/worker.grpc.pb.h"
#include "router/admission_control.h"
#include "router/openai_protocol.h"
#include "router/request_state.h"
#include "router/router_metrics.h"
#include "router/scheduler.h"
#include "router/text_codec.h"
#include "router/worker_channels.h"

namespace pdspark::router {

struct GenerateInput {
  std::string request_id;  // empty: one is generated
  std::vector<uint32_t> prompt_ids;
  SamplingOptions sampling;
  // When sampling.max_tokens is unset: true -> the rest of the context (chat, gRPC), false ->
  // 16 (OpenAI completions default).
  bool default_max_tokens_to_context = false;
  std::chrono::milliseconds timeout{0};  // 0: the router default
  // The request field named in a "too long" error ("prompt" or "messages").
  std::string prompt_param = "prompt";
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
};

struct TokenChunk {
  std::vector<uint32_t> token_ids;
  std::string text;
  // sampling.logprobs set: one per token_ids entry.
  std::vector<v1::TokenLogprob> logprobs;
  // sampling.prompt_logprobs set, on the first chunk: prompt tokens 1..n-1.
  std::vector<v1::TokenLogprob> prompt_logprobs;
};

// The front end's side of one request. Called from whichever thread runs the request; none of
// these may block.
class StreamObserver {
 public:
  virtual ~StreamObserver() = default;
  // Takes a chunk for the client. False when the client is gone: the request is cancelled.
  virtual bool OnChunk(const TokenChunk& chunk) = 0;
  // Polled while the worker is silent, so a disconnect is noticed between tokens too.
  virtual bool ClientGone() const { return false; }
  // Backpressure: calls `ready` once the client has taken enough of what it was given that
  // more may follow (at once when little is pending), and also when the client is gone. The
  // request reads nothing more from its worker until then, so a slow client holds a bounded
  // amount of the router's memory.
  virtual void WhenWritable(std::function<void()> ready) { ready(); }
};

struct GenerateOutcome {
  ApiFinishReason finish = ApiFinishReason::kNone;
  UsageCounts usage;
  v1::SpecCounters spec;
  // Set when finish is kError (or the deadline passed): what to tell the client.
  std::optional<ApiError> error;
  std::string decode_worker;  // the worker that served it
};

// A request past admission: holds its slot and its worker choice until destroyed.
class AdmittedRequest {
 public:
  ~AdmittedRequest();
  const std::string& request_id() const { return request_id_; }
  uint32_t prompt_tokens() const { return static_cast<uint32_t>(input_.prompt_ids.size()); }
  uint32_t max_tokens() const { return max_tokens_; }
  const Assignment& assignment() const { return assignment_; }

 private:
  friend class RequestHandler;
  AdmittedRequest() = default;

  GenerateInput input_;
  std::string request_id_;
  uint32_t max_tokens_ = 0;
  std::chrono::system_clock::time_point deadline_;
  Assignment assignment_;
  std::unique_ptr<AdmissionController::Ticket> ticket_;
  std::function<void()> on_release_;  // unregisters the request id, updates the gauge
};

// The logprobs a worker sent with some tokens (WorkerGenerateResponse, PrefillProgress).
struct WorkerLogprobs {
  const google::protobuf::RepeatedPtrField<v1::TokenLogprob>* tokens = nullptr;
  const google::protobuf::RepeatedPtrField<v1::TokenLogprob>* prompt = nullptr;
};

class RequestHandler {
 public:
  struct Options {
    uint32_t max_model_len = 4096;
    std::chrono::milliseconds default_timeout{600'000};
    // How often ClientGone() is polled.
    std::chrono::milliseconds cancel_poll{20};
    // Conditional disaggregation: prompts at least this long prefill on a prefill worker (when
    // one is registered); shorter ones prefill on the decode worker.
    uint32_t disagg_min_prompt_tokens = 0;
    // Lease of a decode-side reservation the prefill worker has not delivered into yet.
    std::chrono::milliseconds reservation_lease{30'000};
    // How long a request waits for the decode worker's KV pool when its Reserve is refused
    // for lack of space (RESOURCE_EXHAUSTED), retrying with back-off, before it prefills on
    // the decode worker instead. 0: fall back at once.
    std::chrono::milliseconds reserve_wait{10'000};
    // Calls per stage before the request fails (docs/reliability.md): prefill attempts on
    // distinct prefill workers, decode attempts (retries and migrations) on distinct decode
    // workers.
    uint32_t max_attempts = 3;
    // Stall timer of one prefill call (prefill + KV transfer + first token): past it the
    // prefill worker is presumed stuck, the reservation is released and another one is tried.
    std::chrono::milliseconds prefill_attempt_timeout{30'000};
    // Stall timer of a decode stream: no message for this long and the worker is presumed
    // stuck; the request moves to another decode worker. 0: off (heartbeats still count).
    std::chrono::milliseconds decode_stall_timeout{60'000};
    // A call whose worker has missed this many heartbeat intervals, and which has made no
    // progress for as long, is given up. More than the registry's 3 (which only stops new
    // work): an overloaded worker can miss a few heartbeats and still be serving.
    int give_up_missed_heartbeats = 10;
  };

  RequestHandler(Options options, Scheduler* scheduler, AdmissionController* admission,
                 const TextCodec* codec, WorkerChannels* channels, RouterMetrics* metrics);
  ~RequestHandler();

  // 400 (too long, duplicate id), 429 (full), 503 (no decode worker).
  std::variant<std::unique_ptr<AdmittedRequest>, ApiError> Admit(GenerateInput input);

  // Streams the request to `observer`; the task returns when the request has finished. It
  // holds no thread while it waits for a worker or the client.
  Task<GenerateOutcome> Run(AdmittedRequest& request, StreamObserver& observer);

  // Cancels a live request; false if none has this id.
  bool Abort(const std::string& request_id);

  // Shutdown: refuse new requests (503), give live ones `grace` to finish, then cancel the rest.
  void Drain(std::chrono::milliseconds grace);

  const TextCodec& codec() const { return *codec_; }
  const Options& options() const { return options_; }

 private:
  struct Live;  // a request between Admit and its end: what cancellation needs
  struct Attempt;

  // kReady: decode continues from the reservation; kFallback: prefill on the decode worker
  // (reserve failed); kRetry: the prefill worker failed or stalled, the reservation is
  // released, another prefill worker may be tried; kDone: the request ended.
  enum class PrefillResult { kReady, kFallback, kRetry, kDone };

  // The prefill stage: RunPrefill on up to max_attempts prefill workers (replacing the decode
  // worker too when it went unhealthy). True when the request ended there; false when the
  // decode stage goes on, from `*reservation` or colocated when it is empty.
  Task<bool> PrefillStage(AdmittedRequest& request, Live& live, StreamObserver& observer,
                          Attempt& state, GenerateOutcome& outcome, WorkerSnapshot* decode,
                          std::string* reservation);
  // The decode stage: RunAttempt on up to max_attempts decode workers (retries, migrations).
  Task<void> DecodeStage(AdmittedRequest& request, Live& live, StreamObserver& observer,
                         Attempt& state, GenerateOutcome& outcome, WorkerSnapshot* worker,
                         std::string reservation);
  // Disaggregated prefill: Reserve on the decode worker, Prefill on the prefill worker (which
  // pushes the state into the reservation), then the first token to the client. kFallback:
  // prefill locally on the decode worker instead; kDone: the request ended (first token
  // finished it, cancelled, deadline).
  Task<PrefillResult> RunPrefill(AdmittedRequest& request, const WorkerSnapshot& prefill,
                                 const WorkerSnapshot& decode, Live& live, StreamObserver& observer,
                                 Attempt& state, GenerateOutcome& outcome,
                                 std::string* reservation);
  // One call to a decode worker (colocated when `reservation` is empty; tokens the client has
  // already seen are replayed as generated_token_ids). Returns false when the worker failed
  // (outcome.error says how) and the request may move to another decode worker: before any
  // token that is a plain retry, after some a migration.
  Task<bool> RunAttempt(AdmittedRequest& request, const WorkerSnapshot& worker,
                        const std::string& reservation, Live& live, StreamObserver& observer,
                        Attempt& state, GenerateOutcome& outcome);
  // Detokenizes, matches stop strings, enforces max_tokens and hands the chunk to the client,
  // then waits until the client can take more; false when the client is gone. `*stopped_here` is
  // set when a stop string ended it. `logprobs`: one per id, or none when the request asks for
  // none; `prompt_logprobs` go with the first chunk.
  Task<bool> Deliver(const uint32_t* ids, size_t n, const WorkerLogprobs& logprobs,
                     AdmittedRequest& request, Attempt& state, StreamObserver& observer,
                     GenerateOutcome& outcome, bool* stopped_here);
  void SendCancel(const WorkerSnapshot& worker, const std::string& request_id);
  void SendPrefillCancel(const WorkerSnapshot& worker, const std::string& request_id);
  // `transfer_completed`: the prefill worker reported the state delivered (STAGE_COMPLETED).
  void SendRelease(const WorkerSnapshot& worker, const std::string& reservation,
                   bool transfer_completed);
  void PollCancellations();
  // Waits (with `lock` on mu_) until no request is live or `until`; true when none is.
  bool WaitForNoLive(std::unique_lock<std::mutex>& lock,
                     std::chrono::steady_clock::time_point until);

  Options options_;
  Scheduler* scheduler_;
  AdmissionController* admission_;
  const TextCodec* codec_;
  WorkerChannels* channels_;
  RouterMetrics* metrics_;

  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Live>> live_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::atomic<bool> draining_{false};
  std::thread poller_;
};

// Maps an ApiError's HTTP status to the gRPC code for the same failure.
grpc::StatusCode GrpcCodeFor(const ApiError& error);

// "cmpl-" / "chatcmpl-" style ids: prefix + 24 random hex digits.
std::string RandomId(std::string_view prefix);

}  // namespace pdspark::router
