// The decode worker's Generate streams on gRPC's callback API: no thread per stream. Each
// request is a GenerateStream (a ServerWriteReactor); the engine's events for it go to its
// queue on the engine thread, which never blocks or writes. One StreamPump thread starts every
// stream's writes: it drains what a stream queued into one message (the tokens of several
// steps when the client reads slower than the engine steps), starts the next write when the
// previous one completed, ends the stream with the engine's final event, and sends a request
// that waits in the engine's queue an empty message every half second while the engine keeps
// stepping (the router gives up on a call without progress, --decode-stall-timeout-ms).
//
// A client that goes away (the router cancelled, a deadline passed) cancels the engine request
// at once (OnCancel); the stream still ends only after the engine's final event, so the
// request's cache is released by the time the call is over.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/serving/request.h"
#include "engine/serving/serving_engine.h"
#include "grpcpp/grpcpp.h"
#include "pdspark/v1/worker.pb.h"

namespace pdspark::decode {

class GenerateStream;

// What a stream shares with the engine's sink and the pump; outlives the reactor.
struct StreamState {
  std::mutex mu;
  GenerateStream* reactor = nullptr;  // null once the call is done
  std::string request_id;
  std::deque<serving::RequestEvent> events;
  bool writing = false;      // a write is in flight
  bool scheduled = false;    // waiting in the pump's ready list
  bool client_gone = false;  // a write failed or the call was cancelled: write no more
  bool finished = false;     // Finish was called
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

class StreamPump {
 public:
  explicit StreamPump(const serving::ServingEngine* engine);
  ~StreamPump();  // joins the thread; every stream must be done
  StreamPump(const StreamPump&) = delete;
  StreamPump& operator=(const StreamPump&) = delete;

  void Add(const std::shared_ptr<StreamState>& state);
  void Remove(const std::shared_ptr<StreamState>& state);
  // The stream has something to write (events, or a completed write with more queued).
  void Schedule(const std::shared_ptr<StreamState>& state);

 private:
  void Loop();
  // Starts the stream's next write, or its Finish; called on the pump thread only.
  void Pump(const std::shared_ptr<StreamState>& state);
  // Empty messages for streams whose requests wait in the engine's queue.
  void SendKeepalives();

  const serving::ServingEngine* engine_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<StreamState>> ready_;
  std::set<std::shared_ptr<StreamState>> live_;
  bool stopping_ = false;
  int64_t last_steps_ = 0;
  std::thread thread_;
};

class GenerateStream : public grpc::ServerWriteReactor<v1::WorkerGenerateResponse> {
 public:
  // Starts the request (or finishes the call with the reason it cannot start). `prefilled`:
  // the state a reservation delivered (null for a colocated request).
  GenerateStream(serving::ServingEngine* engine, StreamPump* pump, serving::RequestSpec spec);
  // A call refused before it started.
  explicit GenerateStream(const grpc::Status& refused);

  // Pump thread: the message to write next is built here and must live until OnWriteDone.
  v1::WorkerGenerateResponse& outgoing() { return outgoing_; }

 private:
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  serving::ServingEngine* engine_ = nullptr;
  StreamPump* pump_ = nullptr;
  std::shared_ptr<StreamState> state_;
  v1::WorkerGenerateResponse outgoing_;
};

}  // namespace pdspark::decode
