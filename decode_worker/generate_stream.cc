#include "decode_worker/generate_stream.h"

#include <utility>

#include "common/base/logging.h"
#include "engine_service/proto_conversions.h"

namespace pdspark::decode {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr auto kKeepaliveEvery = std::chrono::milliseconds(500);

// How the call ends, from the engine's final event.
grpc::Status FinalStatus(const serving::RequestEvent& event) {
  if (event.outcome == serving::Outcome::kCancelled) {
    return {grpc::StatusCode::CANCELLED, "request cancelled"};
  }
  if (event.outcome == serving::Outcome::kFailed &&
      event.error.find("deadline") != std::string::npos) {
    return {grpc::StatusCode::DEADLINE_EXCEEDED, event.error};
  }
  return grpc::Status::OK;
}

// Adds `event` to the message being built; true for the final event.
bool AppendEvent(const serving::RequestEvent& event, v1::WorkerGenerateResponse& out) {
  out.mutable_token_ids()->Add(event.tokens.begin(), event.tokens.end());
  serving::AppendLogprobs(event.logprobs, out.mutable_logprobs());
  serving::AppendLogprobs(event.prompt_logprobs, out.mutable_prompt_logprobs());
  if (event.outcome == serving::Outcome::kRunning) return false;
  out.set_finish_reason(serving::ToProto(event.finish_reason, event.outcome));
  *out.mutable_spec() = serving::ToProto(event.spec);
  out.set_cached_prompt_tokens(static_cast<uint32_t>(event.cached_tokens));
  if (event.outcome == serving::Outcome::kFailed) out.set_error(event.error);
  return true;
}

// With state.mu held: the stream is live with nothing queued and no write in flight (it may get a
// keepalive).
bool Idle(const StreamState& state) {
  return state.reactor != nullptr && !state.finished && !state.writing && !state.client_gone &&
         state.events.empty();
}

// With state.mu held: true when the stream has something to write, no write in flight and no
// place in the pump's ready list yet; it is then marked scheduled and the caller must Schedule it.
bool ClaimSchedule(StreamState& state) {
  const bool claim = !state.writing && !state.scheduled && !state.events.empty();
  state.scheduled = state.scheduled || claim;
  return claim;
}

}  // namespace

StreamPump::StreamPump(const serving::ServingEngine* engine)
    : engine_(engine), last_steps_(engine->Stats().steps) {
  thread_ = std::thread([this] { Loop(); });
}

StreamPump::~StreamPump() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StreamPump::Add(const std::shared_ptr<StreamState>& state) {
  std::lock_guard lock(mu_);
  live_.insert(state);
}

void StreamPump::Remove(const std::shared_ptr<StreamState>& state) {
  std::lock_guard lock(mu_);
  live_.erase(state);
}

void StreamPump::Schedule(const std::shared_ptr<StreamState>& state) {
  {
    std::lock_guard lock(mu_);
    ready_.push_back(state);
  }
  cv_.notify_one();
}

void StreamPump::Loop() {
  auto next_keepalive = SteadyClock::now() + kKeepaliveEvery;
  while (true) {
    std::vector<std::shared_ptr<StreamState>> ready;
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, next_keepalive, [&] { return stopping_ || !ready_.empty(); });
      if (stopping_ && ready_.empty()) return;
      ready.swap(ready_);
    }
    for (const auto& state : ready) Pump(state);
    if (SteadyClock::now() >= next_keepalive) {
      SendKeepalives();
      next_keepalive = SteadyClock::now() + kKeepaliveEvery;
    }
  }
}

// StartWrite and Finish are called on this thread only, never under a lock of ours (gRPC may
// run a reaction inline), and Finish once: the reactor cannot be deleted (OnDone) while this
// thread uses it, since that needs the Finish only this thread calls.
void StreamPump::Pump(const std::shared_ptr<StreamState>& state) {
  enum class Action { kWrite, kWriteAndFinish, kFinish };
  Action action;
  grpc::Status status;
  GenerateStream* reactor;
  {
    std::lock_guard lock(state->mu);
    state->scheduled = false;
    reactor = state->reactor;
    if (reactor == nullptr || state->finished || state->writing || state->events.empty()) return;
    // Everything queued goes in one message: the tokens of several steps when the client reads
    // slower than the engine steps.
    v1::WorkerGenerateResponse& out = reactor->outgoing();
    out.Clear();
    bool last = false;
    while (!state->events.empty() && !last) {
      last = AppendEvent(state->events.front(), out);
      if (last) status = FinalStatus(state->events.front());
      state->events.pop_front();
    }
    if (state->client_gone) {
      if (!last) return;  // nobody reads them; the engine's final event ends the call
      action = Action::kFinish;
    } else {
      action = last ? Action::kWriteAndFinish : Action::kWrite;
      state->writing = !last;
      state->last_write = SteadyClock::now();
    }
    state->finished = last;
  }
  switch (action) {
    case Action::kWrite:
      reactor->StartWrite(&reactor->outgoing());
      break;
    case Action::kWriteAndFinish:
      reactor->StartWriteAndFinish(&reactor->outgoing(), grpc::WriteOptions(), status);
      break;
    case Action::kFinish:
      reactor->Finish(status);
      break;
  }
}

void StreamPump::SendKeepalives() {
  // Only while the engine keeps stepping: a wedged engine must look stalled to the router.
  const int64_t steps = engine_->Stats().steps;
  const bool stepping = steps != last_steps_;
  last_steps_ = steps;
  if (!stepping) return;
  std::vector<std::shared_ptr<StreamState>> live;
  {
    std::lock_guard lock(mu_);
    live.assign(live_.begin(), live_.end());
  }
  const auto due = SteadyClock::now() - kKeepaliveEvery;
  for (const auto& state : live) {
    std::string id;
    {
      std::lock_guard lock(state->mu);
      if (!Idle(*state) || state->last_write > due) continue;
      id = state->request_id;
    }
    // Outside the stream's lock: the engine calls the stream's sink under its own.
    if (!engine_->IsQueued(id)) continue;
    GenerateStream* reactor;
    {
      std::lock_guard lock(state->mu);
      if (!Idle(*state)) continue;
      reactor = state->reactor;
      reactor->outgoing().Clear();
      state->writing = true;
      state->last_write = SteadyClock::now();
    }
    reactor->StartWrite(&reactor->outgoing());
  }
}

GenerateStream::GenerateStream(serving::ServingEngine* engine, StreamPump* pump,
                               serving::RequestSpec spec)
    : engine_(engine), pump_(pump), state_(std::make_shared<StreamState>()) {
  state_->reactor = this;
  state_->request_id = spec.id;
  pump_->Add(state_);
  const absl::Status submitted =
      engine_->Submit(std::move(spec), [state = state_, pump](const serving::RequestEvent& e) {
        bool schedule = false;
        {
          std::lock_guard lock(state->mu);
          if (state->reactor == nullptr || state->finished) return;
          state->events.push_back(e);
          schedule = ClaimSchedule(*state);
        }
        if (schedule) pump->Schedule(state);
      });
  if (!submitted.ok()) {
    // The sink is never called: nothing else can finish the call.
    {
      std::lock_guard lock(state_->mu);
      state_->finished = true;
    }
    Finish(serving::ToGrpcStatus(submitted));
  }
}

GenerateStream::GenerateStream(const grpc::Status& refused) { Finish(refused); }

void GenerateStream::OnWriteDone(bool ok) {
  bool schedule = false;
  {
    std::lock_guard lock(state_->mu);
    state_->writing = false;
    if (!ok) state_->client_gone = true;
    schedule = ClaimSchedule(*state_);
  }
  // The client went away: stop the work and free its cache; its final event ends the call.
  if (!ok) engine_->Cancel(state_->request_id);
  if (schedule) pump_->Schedule(state_);
}

void GenerateStream::OnCancel() {
  if (state_ == nullptr) return;  // refused before it started
  {
    std::lock_guard lock(state_->mu);
    if (state_->finished) return;
    state_->client_gone = true;
  }
  engine_->Cancel(state_->request_id);
}

void GenerateStream::OnDone() {
  if (state_ != nullptr) {
    {
      std::lock_guard lock(state_->mu);
      state_->reactor = nullptr;
      state_->events.clear();
    }
    pump_->Remove(state_);
  }
  delete this;
}

}  // namespace pdspark::decode
